//go:build linux || darwin

package vdso_test

import (
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkClockGettimeSyscall is unix.ClockGettime(CLOCK_MONOTONIC_RAW):
// a system call through the scheduler (entersyscall/exitsyscall).
func BenchmarkClockGettimeSyscall(b *testing.B) {
	var ts unix.Timespec
	b.ReportAllocs()
	for b.Loop() {
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC_RAW, &ts); err != nil {
			b.Fatal(err)
		}
		sinkNs += ts.Nano()
	}
}
