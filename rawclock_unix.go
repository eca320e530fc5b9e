//go:build linux || darwin

package schedclock

import "golang.org/x/sys/unix"

// rawClockName names the reference clock that rates are measured against.
const rawClockName = "CLOCK_MONOTONIC_RAW"

// rawNow reads CLOCK_MONOTONIC_RAW: the kernel's unsteered clock, the
// reference for every rate this package measures.
func rawNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC_RAW, &ts); err != nil {
		return int64(readMono())
	}
	return ts.Nano()
}
