//go:build !linux && !darwin

package main

import "time"

const rawName = "Go's monotonic clock"

var base = time.Now()

func rawNow() int64 { return int64(time.Since(base)) }
