//go:build !linux

package schedclock

import (
	"errors"
	"runtime"
	"testing"
)

// stressCanPin reports whether threads can be pinned to a CPU here: this
// test pins only on Linux.
const stressCanPin = false

func stressCPU(*testing.T) int { return -1 }

func stressPinThread(int) (restore func(), err error) {
	return nil, errors.New("pinning a thread to a CPU is implemented on Linux only")
}

// stressSignalThread has no per-thread timer to arm here: only the
// profiler's own SIGPROFs reach the threads.
func stressSignalThread(int) (stop func(), err error) {
	return nil, errors.New("per-thread SIGPROF timers are armed on Linux only, not on " + runtime.GOOS)
}
