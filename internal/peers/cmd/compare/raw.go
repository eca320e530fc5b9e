package main

import "github.com/schedclock/schedclock/internal/measure"

// rawNow is the clock the drift columns compare against:
// CLOCK_MONOTONIC_RAW, the counter at its calibrated rate with no NTP
// correction, or Go's monotonic clock where there is none.
var rawNow = measure.Raw

// rawName names rawNow in the report.
func rawName() string {
	if measure.RawIsSyscall {
		return "CLOCK_MONOTONIC_RAW"
	}
	return "Go's monotonic clock (no CLOCK_MONOTONIC_RAW here)"
}
