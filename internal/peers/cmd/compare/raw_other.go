//go:build !linux && !darwin

package main

import "time"

// Without CLOCK_MONOTONIC_RAW the drift columns compare against Go's
// monotonic clock instead, and say so.
const rawName = "Go's monotonic clock (no CLOCK_MONOTONIC_RAW here)"

var rawBase = time.Now()

func rawNow() int64 { return int64(time.Since(rawBase)) }
