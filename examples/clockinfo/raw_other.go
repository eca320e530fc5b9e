//go:build !linux && !darwin

package main

import "time"

const rawName = "Go's monotonic clock"

var base = time.Now()

func rawNow() int64 { return int64(time.Since(base)) }

// syscallRaw: no CLOCK_MONOTONIC_RAW system call to compare with here.
var syscallRaw func() int64
