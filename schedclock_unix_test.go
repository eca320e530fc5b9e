//go:build linux || darwin || dragonfly || freebsd || openbsd || solaris

package schedclock_test

import (
	"time"

	"golang.org/x/sys/unix"
)

// processCPU returns the CPU time the process has used, and whether it
// could be read.
func processCPU() (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
