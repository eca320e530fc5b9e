//go:build !linux

package warp

import (
	"runtime"
	"time"
)

// Check cannot pin threads to CPUs here: only Linux lets this package
// set a thread's affinity (macOS has only affinity hints, the BSDs and
// Windows need calls x/sys does not offer on every arch). It says so.
func Check(read func() uint64, rate uint64, budget time.Duration) Report {
	return Report{Reason: "cannot check on GOOS=" + runtime.GOOS, Never: true}
}
