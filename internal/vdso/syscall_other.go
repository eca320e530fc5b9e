//go:build !(linux || darwin || dragonfly || freebsd || openbsd || solaris)

package vdso

// Syscall has no clock_gettime to call: no unix, or a unix whose x/sys
// lacks it (netbsd, aix).
func Syscall(ID) (int64, bool) { return 0, false }
