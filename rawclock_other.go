//go:build !linux && !darwin

package schedclock

// rawClockName names the reference clock that rates are measured against.
// Where there is no CLOCK_MONOTONIC_RAW, Go's monotonic clock stands in.
const rawClockName = "Go monotonic clock"

func rawNow() int64 { return int64(readMono()) }
