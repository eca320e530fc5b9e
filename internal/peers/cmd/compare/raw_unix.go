//go:build linux || darwin

package main

import "golang.org/x/sys/unix"

const rawName = "CLOCK_MONOTONIC_RAW"

// rawNow reads the kernel's raw monotonic clock: the counter at its
// calibrated rate, with no NTP correction.
func rawNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC_RAW, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}
