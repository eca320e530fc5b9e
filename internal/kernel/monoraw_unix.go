//go:build linux || darwin

package kernel

import "golang.org/x/sys/unix"

// HasMonotonicRaw reports whether this system has CLOCK_MONOTONIC_RAW.
const HasMonotonicRaw = true

// MonotonicRaw reads CLOCK_MONOTONIC_RAW, the kernel's unsteered clock,
// in ns. x/sys reads it with a system call, not through the vDSO. Small
// enough to be inlined: a caller pays for the system call alone.
func MonotonicRaw() (ns int64, err error) {
	var ts unix.Timespec
	err = unix.ClockGettime(unix.CLOCK_MONOTONIC_RAW, &ts)
	return int64(ts.Sec)*1e9 + int64(ts.Nsec), err // ts.Nano(), a little cheaper to inline
}
