package schedclock_test

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

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
}

// TestKernelTimeIsMonotonicAcrossGoroutines hands a reading from
// goroutine to goroutine (one per P, each on its own thread as the
// scheduler places it): a reading taken after the one handed over maps
// no earlier than it, through whatever version of the map each got:
// 200,000 handoffs a goroutine (tens of ms).
func TestKernelTimeIsMonotonicAcrossGoroutines(t *testing.T) {
	for _, k := range []schedclock.KernelClock{schedclock.KernelMonotonic, schedclock.KernelBoottime} {
		c := schedclock.Default()
		if _, ok := c.KernelTime(k, c.Now()); !ok {
			require.NotEqual(t, "linux", runtime.GOOS, "no kernel time on Linux")
			return
		}
		var last atomic.Int64 // the latest mapped time handed over
		var inversions, handoffs atomic.Int64
		var wg sync.WaitGroup
		for range max(2, runtime.GOMAXPROCS(0)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 200_000 {
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

// TestFromKernelTimeReversesKernelTime: for kernel times around now
// (the mapping of now, of the clock's early readings, between, and 3 s ahead),
// FromKernelTime gives the least reading KernelTime maps there or
// later; and none for a kernel time before the clock's first reading.
func TestFromKernelTimeReversesKernelTime(t *testing.T) {
	for _, k := range []schedclock.KernelClock{schedclock.KernelMonotonic, schedclock.KernelBoottime} {
		c := schedclock.Default()
		now := c.Now()
		at, ok := c.KernelTime(k, now)
		if !ok {
			require.NotEqual(t, "linux", runtime.GOOS, "no kernel time on Linux")
			t.Skipf("no kernel clocks on %s", runtime.GOOS)
		}
		early, _ := c.KernelTime(k, 1000)
		for _, kt := range []int64{at, at + 1, at - 1, (early + at) / 2, at + 3e9, early, early + 7} {
			r, ok := c.FromKernelTime(k, kt)
			require.True(t, ok, "%v: kernel time %d (now %d, the clock's start %d)", k, kt, at, early)
			got, _ := c.KernelTime(k, r)
			before, _ := c.KernelTime(k, r-1)
			assert.GreaterOrEqual(t, got, kt, "%v: %d maps to reading %d, which maps to %d", k, kt, r, got)
			assert.Less(t, before, kt, "%v: %d maps to reading %d, not the least", k, kt, r)
		}
		first, _ := c.KernelTime(k, 0)
		_, ok = c.FromKernelTime(k, first)
		assert.False(t, ok, "%v: the kernel time of the clock's first reading has no reading before it", k)
	}
	m, err := schedclocktest.NewManual(1e9, 64)
	require.NoError(t, err)
	c, err := schedclock.New(m.Source())
	require.NoError(t, err)
	defer c.Close()
	_, ok := c.FromKernelTime(schedclock.KernelMonotonic, 1)
	assert.False(t, ok, "a Manual's readings are not real time")
}
