package schedclock_test

import (
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
)

// Register and the switch protocol (switch.go) through the public API:
// time continuous across a switch, the writer's delay kept, the freezer
// pinned by readers and clamped, a failed Register undone.
// switch_internal_test.go holds the tests that stop the writer at every
// step and read the latch.

// TestPinningReaderNeverCallsTheNewSource checks that the reader that
// pins a switch reads only the old counter: a new source whose Read
// panics (after its first, successful read) must not panic a reader,
// and the failed Register leaves the clock on the old counter.
func TestPinningReaderNeverCallsTheNewSource(t *testing.T) {
	old := &schedclock.FakeCounter{}
	old.Set(1000)
	c, err := schedclock.New(old.Source("old", 64, 1e9))
	require.NoError(t, err)
	defer c.Close()
	var reads atomic.Int64
	bad := schedclock.Source{Name: "bad", Bits: 64, Rate: 2e9, Read: func() uint64 {
		if reads.Add(1) > 1 {
			panic("new counter broke")
		}
		return 7
	}}
	var pinnedBy schedclock.Instant
	schedclock.SetStep(c, func(step string) {
		if step == "switch.frozen" {
			old.Add(10)
			assert.NotPanics(t, func() { pinnedBy = c.Now() })
			old.Add(10)
		}
	})
	err = c.Register(bad)
	schedclock.SetStep(c, nil)
	require.ErrorIs(t, err, schedclock.ErrInvalidSource)
	assert.Contains(t, err.Error(), "new counter broke")
	assert.Equal(t, schedclock.Instant(10), pinnedBy)
	assert.Equal(t, "old", c.Info().Source)
	assert.Equal(t, schedclock.Instant(20), c.Now(), "the old line again, from the old counter")
}

// TestRelateAnchorNeverBelowThePin: the two counters are related after
// the pin; if the old counter has stepped back since, its line's value
// there is below the value the freezer gave readers, and the new line
// must start from that value instead.
func TestRelateAnchorNeverBelowThePin(t *testing.T) {
	old, next := &schedclock.FakeCounter{}, &schedclock.FakeCounter{}
	c, err := schedclock.New(old.Source("old", 64, 1e9))
	require.NoError(t, err)
	defer c.Close()
	old.Set(10_000)
	next.Set(777)
	var pinned schedclock.Instant
	schedclock.SetStep(c, func(step string) {
		switch step {
		case "switch.frozen":
			pinned = c.Now() // a reader pins the switch at 10 µs
		case "switch.fixed":
			old.StepBack(5_000) // and the old counter steps back before the counters are related
		}
	})
	require.NoError(t, c.Register(next.Source("next", 64, 2e9)))
	schedclock.SetStep(c, nil)
	require.Equal(t, schedclock.Instant(10_000), pinned)
	assert.GreaterOrEqual(t, c.Now(), pinned, "the new line starts below what readers saw")
}

// TestPinClampsACounterBelowTheEpoch: the freezer pins a counter read
// below the frozen line's epoch (skew between CPUs, a counter that stepped
// back) as readers read it, at the epoch.
func TestPinClampsACounterBelowTheEpoch(t *testing.T) {
	// A rate refinement anchors the new line at the pinned value itself.
	// Pinned at the real (lower) counter value, the anchor would lie off
	// the old line, and time would jump forward by the step back.
	t.Run("same-counter switch", func(t *testing.T) {
		counter := &schedclock.FakeCounter{}
		counter.Set(1_000_000)
		src := counter.Source("c", 64, 1_000_000_000)
		c, err := schedclock.New(src)
		require.NoError(t, err)
		defer c.Close()
		counter.Add(1000)
		c.Update()
		atEpoch := c.Now()
		counter.StepBack(500)
		require.Equal(t, atEpoch, c.Now(), "a counter below the epoch reads as the epoch")
		refined := src // the same Read: a new rate for the same counter
		refined.Rate = 2_000_000_000
		require.NoError(t, c.Register(refined))
		assert.Equal(t, atEpoch, c.Now())
		counter.Add(500) // back at the old epoch: both lines must read the same there
		assert.Equal(t, atEpoch, c.Now(), "the switch moved time")
		counter.Add(100)
		assert.Equal(t, atEpoch+50, c.Now(), "100 counts at 2 GHz")
	})
	// One count below a 64-bit epoch is the delta 2^64-1; unclamped, the
	// pin would store 1+delta = 0, which means "not pinned", and later
	// readers would pin again, later than the value the writer froze at.
	t.Run("one count below a 64-bit epoch", func(t *testing.T) {
		counter, next := &schedclock.FakeCounter{}, &schedclock.FakeCounter{}
		counter.Set(1_000_000)
		next.Set(5)
		c, err := schedclock.New(counter.Source("c", 64, 1_000_000_000))
		require.NoError(t, err)
		defer c.Close()
		c.Update()
		frozenAt := c.Now()
		counter.StepBack(1)
		var readerSaw schedclock.Instant
		hooked := false
		schedclock.SetStep(c, func(step string) {
			if step == "switch.fixed" {
				hooked = true
				counter.Add(1001) // time goes on while the writer is stopped here
				readerSaw = c.Now()
			}
		})
		require.NoError(t, c.Register(next.Source("next", 64, 2_000_000_000)))
		schedclock.SetStep(c, nil)
		require.True(t, hooked, "the writer never stopped at switch.fixed: update this test")
		assert.Equal(t, frozenAt, readerSaw, "a reader of the frozen line must read the value it froze at")
		assert.GreaterOrEqual(t, c.Now(), readerSaw, "time went back across the switch")
	})
}

func TestRegisterKeepsTimeContinuous(t *testing.T) {
	c, a := newFake(t, 64, ghz)
	a.Add(5000)
	before := c.Now()

	b := &schedclock.FakeCounter{}
	b.Set(987654321)
	require.NoError(t, c.Register(b.Source("b", 64, 3*ghz)))
	assert.Equal(t, before, c.Now(), "time moved at the switch")
	assert.Equal(t, "b", c.Info().Source)

	// The old counter no longer matters; the new one drives the clock.
	a.Add(1_000_000)
	assert.Equal(t, before, c.Now())
	b.Add(3000)
	assert.InDelta(t, float64(before+1000), float64(c.Now()), 1)

	// Equal rate replaces too.
	d := &schedclock.FakeCounter{}
	at := c.Now()
	require.NoError(t, c.Register(d.Source("d", 32, 3*ghz)))
	assert.Equal(t, at, c.Now())
	assert.Equal(t, "d", c.Info().Source)
	assert.Equal(t, 32, c.Info().Bits)
}

func TestRegisterFromJiffiesToAFineSource(t *testing.T) {
	// A 100 Hz counter moves in 10 ms steps; the switch to a fine counter
	// continues from the value the coarse clock had reached.
	c, j := newFake(t, 32, 100)
	j.Add(7)
	before := c.Now()
	assert.Equal(t, schedclock.Instant(70*time.Millisecond), before)
	fine := &schedclock.FakeCounter{}
	fine.Set(42)
	require.NoError(t, c.Register(fine.Source("fine", 64, ghz)))
	assert.Equal(t, before, c.Now())
	fine.Add(1234)
	assert.Equal(t, before+1234, c.Now())
	// The jiffy counter ticking after the switch changes nothing.
	j.Add(1)
	assert.Equal(t, before+1234, c.Now())

	// And with the package's own jiffy source and a real clock.
	jiffies, err := schedclock.NewJiffies(1000)
	require.NoError(t, err)
	defer jiffies.Stop()
	rc, err := schedclock.New(jiffies.Source())
	require.NoError(t, err)
	defer rc.Close()
	// Wait for a few ticks rather than a fixed 20 ms: under qemu-user on a
	// loaded machine the ticker's goroutine can first run later than that.
	waitStart := time.Now()
	for rc.Now() <= schedclock.Instant(5*time.Millisecond) && time.Since(waitStart) < time.Minute {
		time.Sleep(time.Millisecond)
	}
	last := rc.Now()
	assert.Greater(t, last, schedclock.Instant(5*time.Millisecond), "jiffies did not advance in %v", time.Since(waitStart))
	require.NoError(t, rc.Register(schedclock.Portable()))
	for i := 0; i < 1000; i++ {
		now := rc.Now()
		require.GreaterOrEqual(t, now, last)
		last = now
	}
}

func TestRegisterSlowerSourceIsRefused(t *testing.T) {
	c, a := newFake(t, 64, ghz)
	a.Add(100)
	before := c.Info()
	slow := &schedclock.FakeCounter{}
	err := c.Register(slow.Source("slow", 64, ghz-1))
	require.Error(t, err)
	assert.True(t, errors.Is(err, schedclock.ErrSlowerSource))
	assert.Contains(t, err.Error(), "slow")
	assert.Equal(t, before, c.Info())
	a.Add(100)
	assert.Equal(t, schedclock.Instant(200), c.Now(), "the old source must still drive the clock")
}

// A Source whose Read panics is invalid whatever its rate: a slower one
// too is refused with ErrInvalidSource (its Read is tried before its rate
// is compared), not ErrSlowerSource, the clock unchanged.
func TestRegisterRefusesAPanickingReadWhateverItsRate(t *testing.T) {
	for _, rate := range []uint64{ghz - 1, ghz, 2 * ghz} {
		c, f := newFake(t, 64, ghz)
		f.Add(100)
		before := c.Info()
		err := c.Register(schedclock.Source{Name: "bad", Bits: 64, Rate: rate, Read: func() uint64 { panic("counter on fire") }})
		require.Error(t, err, "%d Hz", rate)
		assert.ErrorIs(t, err, schedclock.ErrInvalidSource, "%d Hz", rate)
		assert.NotErrorIs(t, err, schedclock.ErrSlowerSource, "%d Hz", rate)
		assert.Contains(t, err.Error(), "counter on fire")
		assert.Equal(t, before, c.Info(), "%d Hz", rate)
		f.Add(100)
		assert.Equal(t, schedclock.Instant(200), c.Now(), "%d Hz: the old source must still drive the clock", rate)
	}
}

// A switch between two different counters must not lose the time the
// writer spends stopped inside a read of the new counter: jiffies (1 kHz)
// to a 100 MHz counter, both following a testing/synctest bubble's time,
// the first two reads of the new counter sleeping 25 ms each (Register's
// first read, before anything changes, and the first of the switch
// itself) while both counters go on.
func TestSwitchKeepsTheWritersDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		jiffies := realCounter("jiffies", start, 64, 1000, nil)
		var reads atomic.Int64
		fine := realCounter("fine", start, 64, 100_000_000, func() {
			if reads.Add(1) <= 2 {
				bubbleSleep(25 * time.Millisecond)
			}
		})
		c, err := schedclock.New(jiffies)
		require.NoError(t, err)
		defer c.Close()
		// The clock started at 0 at the jiffy it read first: it lags the
		// bubble's time since start by that jiffy's start, give or take
		// one jiffy.
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
		bubbleSleep(5 * time.Millisecond)
		before := offset()
		require.NoError(t, c.Register(fine))
		after := offset()
		// After the switch the clock may lose at most one jiffy (the old
		// counter's resolution) and a few microseconds against where it was.
		assert.InDelta(t, float64(before), float64(after), float64(time.Millisecond+50*time.Microsecond),
			"offset to the bubble's time %v before the switch, %v after", before, after)
	})
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
// every 728 ms), both following a testing/synctest bubble's time, with a
// read of the new counter returning its value and then stopping the
// writer for 600 ms (82% of the wrap).
func TestStaleNarrowAnchorNeverGoesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		old := realCounter("coarse", start, 64, 100, nil)
		narrowRead := realCounter("narrow", start, 16, 90_000, nil).Read
		var reads atomic.Int64
		narrow := schedclock.Source{Name: "narrow", Bits: 16, Rate: 90_000, Read: func() uint64 {
			v := narrowRead()
			if reads.Add(1) == 9 { // Register's reads of the new counter: a first one alone, then the switch's
				bubbleSleep(600 * time.Millisecond)
			}
			return v
		}}
		c, err := schedclock.New(old)
		require.NoError(t, err)
		defer c.Close()
		bubbleSleep(15 * time.Millisecond)
		require.NoError(t, c.Register(narrow))
		require.GreaterOrEqual(t, reads.Load(), int64(9), "the writer was never stopped")
		last := c.Now()
		t0, c0 := time.Now(), last
		for time.Since(t0) < 1100*time.Millisecond {
			now := c.Now()
			require.GreaterOrEqual(t, now, last, "time went back by %v", time.Duration(last-now))
			last = now
			bubbleSleep(100 * time.Microsecond)
		}
		// And it keeps pace with the bubble's time (no lost wrap).
		assert.InDelta(t, float64(time.Since(t0)), float64(c.Now()-c0), float64(2*time.Millisecond))
	})
}

// Suspend and Resume (switch.go): the clock stands still while
// suspended, reads no counter, and goes on from where it stopped.

func TestSuspendFreezesAndResumeSkipsTheGap(t *testing.T) {
	c, f := newFake(t, 64, ghz)
	f.Add(1000)
	before := c.Now()
	c.Suspend()
	assert.True(t, c.Info().Suspended)
	readsAtSuspend := f.Reads()
	f.Add(5 * ghz)
	assert.Equal(t, before, c.Now())
	c.Suspend() // idempotent
	c.Update()  // no-op while suspended
	f.StepBack(7 * ghz)
	assert.Equal(t, before, c.Now())
	assert.Equal(t, readsAtSuspend, f.Reads(), "a suspended clock must not read the counter")

	c.Resume()
	assert.False(t, c.Info().Suspended)
	assert.Equal(t, before, c.Now())
	f.Add(250)
	assert.Equal(t, before+250, c.Now())
	c.Resume() // idempotent
	assert.Equal(t, before+250, c.Now())
}

func TestRegisterWhileSuspended(t *testing.T) {
	c, f := newFake(t, 64, ghz)
	f.Add(1000)
	c.Suspend()
	b := &schedclock.FakeCounter{}
	b.Set(1 << 40)
	require.NoError(t, c.Register(b.Source("b", 64, 2*ghz)))
	b.Add(1000)
	assert.Equal(t, schedclock.Instant(1000), c.Now(), "still suspended")
	c.Resume()
	assert.Equal(t, schedclock.Instant(1000), c.Now())
	b.Add(2000)
	assert.Equal(t, schedclock.Instant(2000), c.Now())
}
