//go:build linux || darwin || dragonfly || freebsd || openbsd || solaris

// The systems where x/sys has both ClockGettime and CLOCK_REALTIME:
// netbsd lacks the constant, aix the call (syscall_other.go).

package vdso

import "golang.org/x/sys/unix"

// Syscall reads the clock id by clock_gettime(2) through x/sys, without
// looking the vDSO up: a one-off read before Open has run (a fraction of
// a microsecond to a few, against the lookup's hundreds). The id is
// passed as it is (Linux's values; CLOCK_REALTIME is 0 on every one of
// these systems); ok is false if the call fails.
func Syscall(id ID) (ns int64, ok bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(int32(id), &ts); err != nil {
		return 0, false
	}
	return ts.Nano(), true
}
