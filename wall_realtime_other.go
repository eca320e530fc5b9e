//go:build !(linux || darwin || dragonfly || freebsd || openbsd || solaris)

package schedclock

import "github.com/schedclock/schedclock/internal/vdso"

// syscallClock has no clock_gettime to call: no unix, or a unix whose
// x/sys lacks it (netbsd, aix).
func syscallClock(vdso.ID) (int64, bool) { return 0, false }
