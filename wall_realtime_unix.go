//go:build linux || darwin || dragonfly || freebsd || openbsd || solaris

// The systems where x/sys has both ClockGettime and CLOCK_REALTIME:
// netbsd lacks the constant, aix the call (wall_realtime_other.go).

package schedclock

import (
	"time"

	"golang.org/x/sys/unix"
)

// syscallRealtime reads CLOCK_REALTIME by the system call: a provisional
// wall map's one read, before the vDSO has been looked up (a fraction of
// a microsecond to a few, against the lookup's hundreds). Never a
// testing/synctest bubble's fake time; time.Now if the call fails.
func syscallRealtime() time.Time {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_REALTIME, &ts); err != nil {
		return time.Now()
	}
	return time.Unix(ts.Unix())
}
