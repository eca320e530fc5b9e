//go:build linux

package schedclock

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// checkWarp checks that read never goes backwards from one CPU of the
// process's affinity mask to another (see warp.go for how), spending
// about budget on it, and converts the largest warp to nanoseconds at
// rate Hz (0: cycles only). It pins threads of its own, locked to their
// goroutines, which exit with them: no thread of the caller's is moved.
//
// The mask is the calling thread's (sched_getaffinity of thread 0), which
// is the process's unless the caller restricted its own thread.
func checkWarp(read func() uint64, rate uint64, budget time.Duration) warpReport {
	return checkWarpOn(warpEnv{cpus: allowedCPUs, pin: pinThread}, read, rate, budget)
}

// allowedCPUs lists the CPUs in the calling thread's affinity mask, in
// ascending order.
func allowedCPUs() ([]int, error) {
	set, size, err := threadMask()
	if err != nil {
		return nil, err
	}
	var cpus []int
	for cpu := 0; cpu < size; cpu++ {
		if set.IsSet(cpu) {
			cpus = append(cpus, cpu)
		}
	}
	return cpus, nil
}

// threadMask returns the calling thread's affinity mask and how many CPUs
// it can name. It asks for 1024 CPUs first and doubles while the kernel
// says EINVAL (its own mask is larger), as glibc's sched_getaffinity does.
func threadMask() (set unix.CPUSetDynamic, size int, err error) {
	for size = 1024; ; size *= 2 {
		set = unix.NewCPUSet(size)
		err = unix.SchedGetaffinityDynamic(0, set)
		if err == nil || !errors.Is(err, unix.EINVAL) || size >= 1<<20 {
			return set, size, err
		}
	}
}

// pinThread restricts the calling thread to cpu and returns how to give
// it back the mask it had. The caller must have locked its goroutine to
// the thread; the kernel moves the thread before sched_setaffinity
// returns.
func pinThread(cpu int) (restore func() error, err error) {
	saved, _, err := threadMask()
	if err != nil {
		return nil, err
	}
	restore = func() error { return unix.SchedSetaffinityDynamic(0, saved) }
	set := unix.NewCPUSet(cpu + 1)
	set.Set(cpu)
	return restore, unix.SchedSetaffinityDynamic(0, set)
}
