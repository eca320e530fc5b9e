package main

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// handoffCPUs returns two CPUs this process may run on.
func handoffCPUs() ([2]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return [2]int{}, err
	}
	var cpus []int
	for cpu := 0; cpu < 1024 && len(cpus) < 2; cpu++ { // CPU_SETSIZE
		if set.IsSet(cpu) {
			cpus = append(cpus, cpu)
		}
	}
	if len(cpus) < 2 {
		return [2]int{}, fmt.Errorf("only %d CPU allowed", len(cpus))
	}
	return [2]int{cpus[0], cpus[1]}, nil
}

// pinThread binds the calling thread (lock the goroutine to it first)
// to one CPU.
func pinThread(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	return unix.SchedSetaffinity(0, &set)
}
