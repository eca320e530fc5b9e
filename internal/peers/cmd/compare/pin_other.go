//go:build !linux

package main

import (
	"errors"
	"runtime"
)

// Outside Linux the two goroutines are locked to two threads, which the
// system may or may not run on different CPUs.
func handoffCPUs() ([2]int, error) {
	if runtime.NumCPU() < 2 {
		return [2]int{}, errors.New("one CPU")
	}
	return [2]int{0, 1}, nil
}

func pinThread(int) error { return errors.New("threads not pinned on " + runtime.GOOS) }
