package vdso_test

import (
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/schedclock/schedclock/internal/testenv"
	"github.com/schedclock/schedclock/internal/vdso"
)

// TestSignalStorm sends signals that Go handles (signal.Notify'd SIGUSR1,
// SIGCHLD, SIGWINCH) straight to the threads of goroutines that read the
// clock, for 2 s: a signal whose PC is in the vDSO must find g. On arm64
// that needs the g slot (call_linux_arm64.go): without it the process
// dies with "fatal: bad g in signal handler" wherever the runtime sees
// the vDSO page (arm64 hardware; qemu 10 with the runtime fix that
// testdata/qemu10-storm.sh applies). On amd64 g comes from TLS, and the
// test shows that nothing else breaks either. A stress test of seconds:
// the qualification layer's.
func TestSignalStorm(t *testing.T) {
	testenv.Qualify(t)
	c, err := vdso.Open(vdso.MonotonicRaw)
	require.NoError(t, err)
	sigs := make(chan os.Signal, 256)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGCHLD, syscall.SIGWINCH)
	defer signal.Stop(sigs)

	var stop atomic.Bool
	var received atomic.Int64
	go func() {
		for range sigs {
			received.Add(1)
		}
	}()

	const readers = 4
	// A P for every reader and one for the sender: the kernel, not
	// Go's 10 ms preemption, then shares the CPUs between them.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(readers + 2))
	tids := make(chan int, readers)
	results := make([]readInOrder, readers)
	var wg sync.WaitGroup
	for i := range results {
		r := &results[i]
		r.c, r.prev = c, c.Now()
		wg.Go(func() {
			// Locked, so that the thread the signals go to is the one
			// that reads.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			tids <- unix.Gettid()
			for !stop.Load() {
				r.batch()
			}
		})
	}
	threads := make([]int, readers)
	for i := range threads {
		threads[i] = <-tids
	}

	pid := os.Getpid()
	storm := []syscall.Signal{syscall.SIGUSR1, syscall.SIGCHLD, syscall.SIGWINCH}
	sent := 0
	for deadline := time.Now().Add(churnDuration); time.Now().Before(deadline); {
		for _, tid := range threads {
			if unix.Tgkill(pid, tid, storm[sent%len(storm)]) == nil {
				sent++
			}
		}
		// Signals of one kind pending at once merge: let them land
		// (spinning: a timer sleep is a millisecond or more here).
		for t0 := time.Now(); time.Since(t0) < 50*time.Microsecond; {
			runtime.Gosched()
		}
	}
	stop.Store(true)
	wg.Wait()
	time.Sleep(50 * time.Millisecond) // the last deliveries

	var reads int64
	for i, r := range results {
		assert.Zero(t, r.inversions, "reader %d: %d of %d readings went backwards", i, r.inversions, r.reads)
		reads += r.reads
	}
	t.Logf("%d signals sent, %d delivered to the Notify channel, during %d readings (%s)", sent, received.Load(), reads, c.Path())
	require.Positive(t, sent)
	assert.Positive(t, received.Load())
}
