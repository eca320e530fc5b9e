//go:build linux || darwin

package main

import "golang.org/x/sys/unix"

const rawName = "CLOCK_MONOTONIC_RAW (the system call)"

func rawNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC_RAW, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// syscallRaw reads CLOCK_MONOTONIC_RAW through x/sys, a system call, for
// the comparison with Raw's vDSO path.
var syscallRaw = rawNow
