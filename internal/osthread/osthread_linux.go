//go:build linux

package osthread

import (
	"encoding/binary"
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Supported reports whether threads can be pinned to CPUs here.
const Supported = true

// CPUs lists the CPUs in the calling thread's affinity mask, in
// ascending order. The mask is the process's unless the caller
// restricted its own thread.
func CPUs() ([]int, error) {
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
		if err != unix.EINVAL || size >= 1<<20 { // a bare errno: no errors.Is (and its reflection) needed
			return set, size, err
		}
	}
}

// Pin restricts the calling thread to cpu and returns how to give it
// back the mask it had (nil when the mask could not be read). The caller
// must have locked its goroutine to the thread; the kernel moves the
// thread before sched_setaffinity returns.
func Pin(cpu int) (restore func() error, err error) {
	saved, _, err := threadMask()
	if err != nil {
		return nil, err
	}
	restore = func() error { return unix.SchedSetaffinityDynamic(0, saved) }
	set := unix.NewCPUSet(cpu + 1)
	set.Set(cpu)
	return restore, unix.SchedSetaffinityDynamic(0, set)
}

// CurrentCPU asks the kernel which CPU the calling thread runs on.
func CurrentCPU() int {
	var cpu uint32
	// getcpu(cpu, node, tcache): only the first argument is wanted.
	unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0)
	return int(cpu)
}

// Yield lets another thread waiting for this CPU run.
func Yield() { _, _, _ = unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

const (
	sigevThreadID = 4 // SIGEV_THREAD_ID: signal one thread
	clockMono     = 1 // CLOCK_MONOTONIC
)

// SignalProf arms a POSIX timer that sends SIGPROF to the calling
// thread (its goroutine must be locked to it) hz times a second of
// monotonic time, until stop is called. The profiler's own timers count
// the thread's CPU time, which the kernel advances at its ticks, so they
// fire at most about CONFIG_HZ times a second; this one is an hrtimer
// and fires at hz. The runtime takes its signals as profiling signals
// (si_code SI_TIMER on a thread with a profiling timer), so each one
// runs the profiler's handler on the thread, wherever it is stopped.
func SignalProf(hz int) (stop func(), err error) {
	// struct sigevent: a sigval (int or pointer), then signo, notify and,
	// for SIGEV_THREAD_ID, the thread id; 64 bytes in all.
	var ev [64]byte
	off := int(unsafe.Sizeof(uintptr(0)))
	binary.NativeEndian.PutUint32(ev[off:], uint32(unix.SIGPROF))
	binary.NativeEndian.PutUint32(ev[off+4:], sigevThreadID)
	binary.NativeEndian.PutUint32(ev[off+8:], uint32(unix.Gettid()))
	var id int32 // the kernel's timer_t is an int
	if _, _, e := unix.RawSyscall(unix.SYS_TIMER_CREATE, clockMono, uintptr(unsafe.Pointer(&ev)), uintptr(unsafe.Pointer(&id))); e != 0 {
		return nil, fmt.Errorf("timer_create: %w", e)
	}
	period := unix.NsecToTimespec(int64(time.Second) / int64(hz))
	spec := unix.ItimerSpec{Interval: period, Value: period}
	if _, _, e := unix.RawSyscall6(unix.SYS_TIMER_SETTIME, uintptr(id), 0, uintptr(unsafe.Pointer(&spec)), 0, 0, 0); e != 0 {
		_, _, _ = unix.RawSyscall(unix.SYS_TIMER_DELETE, uintptr(id), 0, 0)
		return nil, fmt.Errorf("timer_settime: %w", e)
	}
	return func() { _, _, _ = unix.RawSyscall(unix.SYS_TIMER_DELETE, uintptr(id), 0, 0) }, nil
}
