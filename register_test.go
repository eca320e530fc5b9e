package schedclock_test

// Register from outside: the promises a switch between counters keeps.

import (
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
)

// A switch between two different counters must not lose the time the
// writer spends stopped inside a read of the new counter: jiffies (1 kHz)
// to a 100 MHz counter, both running in real time, the first two reads of
// the new counter sleeping 25 ms each (Register's first read, before
// anything changes, and the first of the switch itself).
func TestSwitchKeepsTheWritersDelay(t *testing.T) {
	start := time.Now()
	jiffies := realCounter("jiffies", start, 64, 1000, nil)
	var reads atomic.Int64
	fine := realCounter("fine", start, 64, 100_000_000, func() {
		if reads.Add(1) <= 2 {
			time.Sleep(25 * time.Millisecond)
		}
	})
	c, err := schedclock.New(jiffies)
	require.NoError(t, err)
	defer c.Close()
	// The clock started at 0 at the jiffy it read first: it lags real time
	// since start by that jiffy's start, give or take one jiffy.
	offset := func() time.Duration {
		// clock - (time since start), tightest of a few brackets.
		best, off := time.Duration(math.MaxInt64), time.Duration(0)
		for i := 0; i < 20; i++ {
			a := time.Since(start)
			now := c.Now()
			b := time.Since(start)
			if b-a < best {
				best, off = b-a, time.Duration(now)-(a+(b-a)/2)
			}
		}
		return off
	}
	time.Sleep(5 * time.Millisecond)
	before := offset()
	require.NoError(t, c.Register(fine))
	after := offset()
	// After the switch the clock may lose at most one jiffy (the old
	// counter's resolution) and a few microseconds against where it was.
	assert.InDelta(t, float64(before), float64(after), float64(time.Millisecond+50*time.Microsecond),
		"offset to real time %v before the switch, %v after", before, after)
}

// A Read that panics during Register leaves the clock exactly as it was.
func TestPanickingReadLeavesTheClockAsItWas(t *testing.T) {
	c, f := newFake(t, 64, ghz)
	f.Add(1000)
	before := c.Info()
	for _, when := range []int64{1, 2, 3, 9} { // the probe, the first and later reads of the relation
		var n atomic.Int64
		bad := schedclock.Source{Name: "bad", Bits: 64, Rate: 2 * ghz, Read: func() uint64 {
			if n.Add(1) >= when {
				panic("counter on fire")
			}
			return uint64(n.Load()) * 1000
		}}
		err := c.Register(bad)
		require.Error(t, err, "read %d panics", when)
		assert.ErrorIs(t, err, schedclock.ErrInvalidSource)
		assert.Contains(t, err.Error(), "counter on fire")
		assert.Equal(t, before, c.Info())
		at := c.Now()
		f.Add(10)
		assert.Equal(t, at+10, c.Now(), "the old counter must still drive the clock")
	}
	// Registering the old counter again (same rate) is accepted.
	require.NoError(t, c.Register(f.Source("fake", 64, ghz)))

	_, err := schedclock.New(schedclock.Source{Name: "bad", Bits: 64, Rate: ghz, Read: func() uint64 { panic("dead") }})
	assert.ErrorIs(t, err, schedclock.ErrInvalidSource)
	assert.Contains(t, err.Error(), "dead")
}

// A writer stopped for longer than 3/8 of a narrow new counter's wrap
// between reading the new counter and publishing the line anchored at it
// must not make time go back: 64-bit 100 Hz to 16-bit 90 kHz (a wrap
// every 728 ms), with a read of the new counter returning its value and
// then stopping the writer for 600 ms (82% of the wrap).
func TestStaleNarrowAnchorNeverGoesBack(t *testing.T) {
	start := time.Now()
	old := realCounter("coarse", start, 64, 100, nil)
	narrowRead := realCounter("narrow", start, 16, 90_000, nil).Read
	var reads atomic.Int64
	narrow := schedclock.Source{Name: "narrow", Bits: 16, Rate: 90_000, Read: func() uint64 {
		v := narrowRead()
		if reads.Add(1) == 9 { // Register's reads of the new counter: a first one alone, then the switch's
			time.Sleep(600 * time.Millisecond)
		}
		return v
	}}
	c, err := schedclock.New(old)
	require.NoError(t, err)
	defer c.Close()
	time.Sleep(15 * time.Millisecond)
	require.NoError(t, c.Register(narrow))
	require.GreaterOrEqual(t, reads.Load(), int64(9), "the writer was never stopped")
	last := c.Now()
	t0, c0 := time.Now(), last
	for time.Since(t0) < 1100*time.Millisecond {
		now := c.Now()
		require.GreaterOrEqual(t, now, last, "time went back by %v", time.Duration(last-now))
		last = now
		time.Sleep(100 * time.Microsecond)
	}
	// And it keeps pace with real time (no lost wrap).
	assert.InDelta(t, float64(time.Since(t0)), float64(c.Now()-c0), float64(2*time.Millisecond))
}
