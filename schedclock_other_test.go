//go:build !(linux || darwin || dragonfly || freebsd || openbsd || solaris)

package schedclock_test

import "time"

// processCPU cannot read the process's CPU time here (no unix, or one
// whose x/sys lacks ClockGettime or CLOCK_PROCESS_CPUTIME_ID: netbsd, aix).
func processCPU() (time.Duration, bool) { return 0, false }
