//go:build !linux && !darwin

package measure

import "time"

// RawIsSyscall says that Raw is not CLOCK_MONOTONIC_RAW: there is none
// here, and Raw is Go's monotonic clock instead.
const RawIsSyscall = false

var rawBase = time.Now()

// Raw reads Go's monotonic clock, in ns since the package started: the
// nearest thing to CLOCK_MONOTONIC_RAW where there is none.
func Raw() int64 { return int64(time.Since(rawBase)) }
