package schedclock_test

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/schedclocktest"
)

// TestKernelTimeOnAManualClockIsNone: a Manual's readings are not real
// time; no kernel clock maps them.
func TestKernelTimeOnAManualClockIsNone(t *testing.T) {
	m, err := schedclocktest.NewManual(1e9, 64)
	require.NoError(t, err)
	c, err := schedclock.New(m.Source())
	require.NoError(t, err)
	defer c.Close()
	for _, k := range []schedclock.KernelClock{schedclock.KernelMonotonic, schedclock.KernelBoottime, schedclock.KernelPerf, 3} {
		_, ok := c.KernelTime(k, c.Now())
		assert.False(t, ok, "clock %d", k)
	}
	_, ok := (*schedclock.Clock)(nil).KernelTime(schedclock.KernelMonotonic, 0)
	assert.False(t, ok)
}

// TestKernelTimeIsMonotonicAcrossGoroutines hands a reading from
// goroutine to goroutine (one per P, each on its own thread as the
// scheduler places it): a reading taken after the one handed over maps
// no earlier than it, through whatever version of the map each got.
func TestKernelTimeIsMonotonicAcrossGoroutines(t *testing.T) {
	for _, k := range []schedclock.KernelClock{schedclock.KernelMonotonic, schedclock.KernelBoottime} {
		c := schedclock.Default()
		if _, ok := c.KernelTime(k, c.Now()); !ok {
			require.NotEqual(t, "linux", runtime.GOOS, "no kernel time on Linux")
			return
		}
		var last atomic.Int64 // the latest mapped time handed over
		var inversions, handoffs atomic.Int64
		deadline := time.Now().Add(time.Second)
		var wg sync.WaitGroup
		for range max(2, runtime.GOMAXPROCS(0)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; ; n++ {
					if n%1024 == 0 && time.Now().After(deadline) {
						return
					}
					seen := last.Load()
					kt, _ := c.KernelTime(k, c.Now())
					if kt < seen {
						inversions.Add(1)
					}
					for {
						cur := last.Load()
						if kt <= cur || last.CompareAndSwap(cur, kt) {
							break
						}
					}
					handoffs.Add(1)
				}
			}()
		}
		wg.Wait()
		t.Logf("%v: %d handoffs, %d inversions; %s", k, handoffs.Load(), inversions.Load(), c.Info().KernelTime)
		assert.Zero(t, inversions.Load(), "a later reading mapped earlier (%v)", k)
	}
}
