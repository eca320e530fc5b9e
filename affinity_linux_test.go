//go:build linux

package schedclock

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// testCPUs returns two CPUs this process may run on. When there is only
// one, or the affinity cannot be read, it says so with t.Log and returns
// false: the threads then share what there is, unpinned or on that CPU.
func testCPUs(t *testing.T) (cpus [2]int, two bool) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Logf("cannot read the CPU affinity (%v): threads are not pinned, and cross-CPU reordering is not shown", err)
		return [2]int{-1, -1}, false
	}
	n := 0
	for cpu := 0; cpu < 1024 && n < 2; cpu++ {
		if set.IsSet(cpu) {
			cpus[n] = cpu
			n++
		}
	}
	if n < 2 {
		t.Logf("only CPU %d is available: both threads share it, so cross-CPU reordering is not shown, only interleavings", cpus[0])
		return [2]int{cpus[0], cpus[0]}, false
	}
	return cpus, true
}

// lockToCPU locks the calling goroutine to its thread and that thread to
// cpu (when cpu >= 0), and returns how to give the thread its mask back:
// the goroutine must defer it and exit without unlocking. The runtime
// then ends the thread, except the main thread, which it keeps: pinned,
// that one would pin every goroutine later scheduled on it.
func lockToCPU(t *testing.T, cpu int) (unpin func()) {
	runtime.LockOSThread()
	if cpu < 0 {
		return func() {}
	}
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		t.Errorf("reading a thread's CPU mask: %v", err)
		return func() {}
	}
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		t.Errorf("pinning a thread to CPU %d: %v", cpu, err)
	}
	return func() { _ = unix.SchedSetaffinity(0, &old) }
}

// yieldCPU lets another thread waiting for this CPU run.
func yieldCPU() { _, _, _ = unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
