package schedclock

import (
	"errors"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/hwcounter"
)

// TestCoarseTickerStartsAtOnce: on the default clock, whose background
// work waits firstUseGrace after the first use, Coarse's ticker starts at
// once: from a first use that is a Coarse, and from a Coarse during the
// grace. In a testing/synctest bubble (a default-like clock on the
// portable source, made there), so that it is a matter of the schedule,
// not of how busy this machine is: the value must have been refreshed one
// resolution after the first Coarse.
func TestCoarseTickerStartsAtOnce(t *testing.T) {
	noCounter := func() (hwcounter.Source, hwcounter.RateOrigin, float64, error) {
		return hwcounter.Source{}, 0, 0, errors.New("none here")
	}
	for _, firstUse := range []string{"Coarse", "Now"} {
		t.Run("first use "+firstUse, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newDefaultClock([]*hwcounter.Counter{{Arch: runtime.GOARCH, Probe: noCounter}})
				defer func() { require.NoError(t, c.Close()) }()
				if firstUse == "Now" {
					c.nanos()
					bubbleSleep(firstUseGrace / 5)
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
