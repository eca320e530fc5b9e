//go:build !linux

package schedclock

import (
	"runtime"
	"time"
)

// checkWarp cannot pin threads to CPUs here: only Linux lets this package
// set a thread's affinity (macOS has only affinity hints, the BSDs and
// Windows need calls x/sys does not offer on every arch). It says so.
func checkWarp(read func() uint64, rate uint64, budget time.Duration) warpReport {
	return warpReport{Reason: "cannot check on GOOS=" + runtime.GOOS}
}
