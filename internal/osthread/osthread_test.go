package osthread

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPinAndRestore pins a locked thread to each allowed CPU in turn: the
// thread runs there and sees only that CPU in its mask, and gets its
// whole mask back.
func TestPinAndRestore(t *testing.T) {
	cpus, err := CPUs()
	if !Supported {
		assert.Error(t, err)
		_, err = Pin(0)
		assert.Error(t, err)
		assert.Equal(t, -1, CurrentCPU())
		return
	}
	require.NoError(t, err)
	require.NotEmpty(t, cpus)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		for _, cpu := range cpus {
			restore, err := Pin(cpu)
			if !assert.NoError(t, err) {
				return
			}
			assert.Equal(t, cpu, CurrentCPU(), "the kernel moves the thread before sched_setaffinity returns")
			mask, err := CPUs()
			assert.NoError(t, err)
			assert.Equal(t, []int{cpu}, mask)
			Yield()
			if !assert.NoError(t, restore()) {
				return // exits locked: the runtime ends the pinned thread
			}
			mask, err = CPUs()
			assert.NoError(t, err)
			assert.Equal(t, cpus, mask)
		}
		runtime.UnlockOSThread()
	}()
	<-done
}

// TestSignalProf arms and stops a thread's SIGPROF timer: without a
// profile running, the runtime takes the signals and ignores them.
func TestSignalProf(t *testing.T) {
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		stop, err := SignalProf(1000)
		if err == nil {
			time.Sleep(20 * time.Millisecond)
			stop()
		}
		done <- err
	}()
	err := <-done
	if !Supported {
		assert.ErrorContains(t, err, "Linux only")
		return
	}
	assert.NoError(t, err)
}
