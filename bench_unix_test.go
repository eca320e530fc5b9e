//go:build linux || darwin

package schedclock_test

import (
	"testing"

	"golang.org/x/sys/unix"
)

// CLOCK_MONOTONIC_RAW through golang.org/x/sys/unix: on Linux
// unix.ClockGettime is a system call, not the vDSO (Go exposes no vDSO
// call for other clocks than the runtime's), so this is what reading the
// raw clock costs a Go program.
func BenchmarkClockGettimeRaw(b *testing.B) {
	raw := func() int64 {
		var ts unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC_RAW, &ts)
		return ts.Nano()
	}
	bench(b, func(b *testing.B) {
		var s int64
		for b.Loop() {
			s += raw()
		}
		sink += s
	}, raw)
}
