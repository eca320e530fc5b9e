//go:build linux || darwin || dragonfly || freebsd || openbsd || solaris

// The systems where x/sys has both ClockGettime and CLOCK_REALTIME:
// netbsd lacks the constant, aix the call (wall_realtime_other.go).

package schedclock

import (
	"github.com/schedclock/schedclock/internal/vdso"
	"golang.org/x/sys/unix"
)

// syscallClock reads the clock id by the system call: a provisional
// map's one read, before the vDSO has been looked up (a fraction of a
// microsecond to a few, against the lookup's hundreds); ok is false if
// the call fails.
func syscallClock(id vdso.ID) (ns int64, ok bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(int32(id), &ts); err != nil {
		return 0, false
	}
	return ts.Nano(), true
}
