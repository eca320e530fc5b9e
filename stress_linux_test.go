package schedclock

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// stressCanPin reports whether threads can be pinned to a CPU here.
const stressCanPin = true

// stressCPU returns the first CPU this process may run on.
func stressCPU(t *testing.T) int {
	var set unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &set))
	for cpu := 0; cpu < 1024; cpu++ { // CPU_SETSIZE
		if set.IsSet(cpu) {
			return cpu
		}
	}
	require.FailNow(t, "no CPU in this process's affinity mask")
	return -1
}

// stressPinThread binds the calling thread (the goroutine must be locked
// to it) to one CPU, and returns how to give the thread its mask back.
// The goroutine must call it before it exits: a locked goroutine's thread
// exits with it, except the main thread, which the runtime keeps, and a
// pinned main thread would pin every goroutine later scheduled on it.
func stressPinThread(cpu int) (restore func(), err error) {
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return nil, err
	}
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return nil, err
	}
	return func() { _ = unix.SchedSetaffinity(0, &old) }, nil
}

const (
	stressSigevThreadID = 4 // SIGEV_THREAD_ID: signal one thread
	stressClockMono     = 1 // CLOCK_MONOTONIC
)

// stressSignalThread arms a POSIX timer that sends SIGPROF to the calling
// thread (its goroutine must be locked to it) hz times a second of
// monotonic time, until stop is called. The profiler's own timers count
// the thread's CPU time, which the kernel advances at its ticks, so they
// fire at most about CONFIG_HZ times a second; this one is an hrtimer
// and fires at hz. The runtime takes its signals as profiling signals
// (si_code SI_TIMER on a thread with a profiling timer), so each one
// runs the profiler's handler on the thread, wherever it is stopped.
func stressSignalThread(hz int) (stop func(), err error) {
	// struct sigevent: a sigval (int or pointer), then signo, notify and,
	// for SIGEV_THREAD_ID, the thread id; 64 bytes in all.
	var ev [64]byte
	off := int(unsafe.Sizeof(uintptr(0)))
	binary.NativeEndian.PutUint32(ev[off:], uint32(unix.SIGPROF))
	binary.NativeEndian.PutUint32(ev[off+4:], stressSigevThreadID)
	binary.NativeEndian.PutUint32(ev[off+8:], uint32(unix.Gettid()))
	var id int32 // the kernel's timer_t is an int
	if _, _, e := unix.RawSyscall(unix.SYS_TIMER_CREATE, stressClockMono, uintptr(unsafe.Pointer(&ev)), uintptr(unsafe.Pointer(&id))); e != 0 {
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
