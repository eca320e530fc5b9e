//go:build !linux

package osthread

import (
	"errors"
	"runtime"
)

// Supported reports whether threads can be pinned to CPUs here: only
// Linux lets this package set a thread's affinity (macOS has only
// affinity hints, the BSDs and Windows need calls x/sys does not offer
// on every arch).
const Supported = false

// CPUs cannot read a thread's affinity mask here.
func CPUs() ([]int, error) {
	return nil, errors.New("a thread's CPU mask is read on Linux only, not on " + runtime.GOOS)
}

// Pin cannot pin a thread here.
func Pin(int) (restore func() error, err error) {
	return nil, errors.New("pinning a thread to a CPU is implemented on Linux only")
}

// CurrentCPU does not know the CPU here: -1.
func CurrentCPU() int { return -1 }

// Yield lets other goroutines run; threads are never pinned together here.
func Yield() { runtime.Gosched() }

// SignalProf has no per-thread timer to arm here: only the profiler's own
// SIGPROFs reach the threads.
func SignalProf(int) (stop func(), err error) {
	return nil, errors.New("per-thread SIGPROF timers are armed on Linux only, not on " + runtime.GOOS)
}
