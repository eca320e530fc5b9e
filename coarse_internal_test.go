package schedclock

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCoarseTickerStartsAtOnce: on the default clock, whose set-up
// chooses the hardware before its background loop runs, Coarse's ticker
// starts at once: from a first use that is a Coarse, and from a Coarse
// soon after a first Now. In a testing/synctest bubble (a default-like
// clock on the portable source, made there), so that it is a matter of
// the schedule, not of how busy this machine is: the value must have
// been refreshed one resolution after the first Coarse.
func TestCoarseTickerStartsAtOnce(t *testing.T) {
	noCounter := func() (Source, rateOrigin, float64, error) {
		return Source{}, 0, 0, errors.New("none here")
	}
	for _, firstUse := range []string{"Coarse", "Now"} {
		t.Run("first use "+firstUse, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newDefaultClock([]*descriptor{{Arch: runtime.GOARCH, Probe: noCounter}})
				defer func() { require.NoError(t, c.Close()) }()
				if firstUse == "Now" {
					c.nanos()
					bubbleSleep(2 * time.Millisecond)
				}
				stored := c.Coarse()
				bubbleSleep(c.st.ticker.every + 1)
				assert.NotEqual(t, stored, c.Coarse(), "Coarse not refreshed one resolution after its first call")
			})
		})
	}
}

// A value already a resolution old when Coarse's ticker starts is cleared
// then, not a period later: where the reader holds the only P, the ticker
// first runs when the reader is preempted, a time slice after the value
// was stored, and a tick a period on would come only after another slice.
// In a testing/synctest bubble, on a counter that reads the bubble's time
// (not Bubble, on which Coarse is exact); the ticker is held back (marked
// running) while the value ages, as the reader's time slice holds it back.
func TestCoarseTickerClearsAnOldValueWhenItStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		// A resolution of kernelTickMax: the kernel's ticks (real time,
		// outside the bubble) would refresh a stale value too.
		c, err := New(Source{Name: "fake time", Bits: 64, Rate: 1e9, Read: func() uint64 { return uint64(time.Since(start)) }}, WithCoarseResolution(kernelTickMax))
		require.NoError(t, err)
		defer func() { require.NoError(t, c.Close()) }()
		c.st.ticker.running.Store(true) // Coarse asks for no ticker
		stored := c.Coarse()
		bubbleSleep(5 * c.st.ticker.every)
		c.st.ticker.wanted.Store(&startTicker)
		c.kick()
		synctest.Wait() // the ticker starts
		assert.Equal(t, c.Now(), c.Coarse(), "the value stored at %v outlived the ticker's start", time.Duration(stored))
	})
}

// tickerGoroutines counts the goroutines running Coarse's ticker; in a
// testing/synctest bubble, only those of the bubble.
func tickerGoroutines(inBubble bool) int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "schedclock.tickCoarse(") && (!inBubble || strings.Contains(g, "synctest bubble")) {
			n++
		}
	}
	return n
}

// TestCoarsesTickerStops: Coarse's ticker stops once nobody reads Coarse
// (coarseIdleTicks ticks without a read), its goroutine gone, and the
// next Coarse starts it again: on a clock made by New, in a
// testing/synctest bubble, and on the default clock.
func TestCoarsesTickerStops(t *testing.T) {
	t.Run("New", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			c, err := New(Source{Name: "fake time", Bits: 64, Rate: 1e9, Read: func() uint64 { return uint64(time.Since(start)) }})
			require.NoError(t, err)
			defer func() { require.NoError(t, c.Close()) }()
			for range 10 {
				c.Coarse()
				bubbleSleep(c.st.ticker.every / 2)
			}
			synctest.Wait()
			require.True(t, c.st.ticker.running.Load(), "no ticker while Coarse is read")
			require.Equal(t, 1, tickerGoroutines(true))
			bubbleSleep(time.Duration(coarseIdleTicks+1) * c.st.ticker.every)
			synctest.Wait()
			assert.False(t, c.st.ticker.running.Load(), "the ticker runs with nobody reading Coarse")
			assert.Zero(t, tickerGoroutines(true), "the ticker's goroutine is still there")
			stored := c.Coarse()
			synctest.Wait()
			assert.True(t, c.st.ticker.running.Load(), "the next Coarse did not start the ticker again")
			bubbleSleep(c.st.ticker.every + 1)
			assert.Greater(t, c.Coarse(), stored, "Coarse not refreshed once the ticker started again")
		})
	})
	t.Run("default", func(t *testing.T) {
		c := Default()
		for range 10 {
			c.Coarse()
			time.Sleep(c.st.ticker.every / 2)
		}
		require.Eventually(t, func() bool { return !c.st.ticker.running.Load() && tickerGoroutines(false) == 0 }, 10*time.Second, time.Millisecond,
			"the default clock's ticker runs with nobody reading Coarse")
	})
}
