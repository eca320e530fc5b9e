package schedclock_test

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/schedclocktest"
)

// Faults from outside: user code the clock calls (a Source's
// Read, a reference) may panic, block or lie at any moment, and the clock
// must stay usable.

// flakySource is a Source over a Manual counter whose Read panics the
// next n times once armed.
type flakySource struct {
	m      *schedclocktest.Manual
	skip   atomic.Int64 // reads let through before the panics
	panics atomic.Int64
}

func newFlaky(rate uint64, bits int) *flakySource {
	return &flakySource{m: mustManual(rate, bits)}
}

func (f *flakySource) read() uint64 {
	if f.panics.Load() > 0 {
		if f.skip.Load() > 0 && f.skip.Add(-1) >= 0 {
			return f.m.Read()
		}
		if f.panics.Add(-1) >= 0 {
			panic("transient counter fault")
		}
	}
	return f.m.Read()
}

func (f *flakySource) source() schedclock.Source {
	return schedclock.Source{Name: "flaky", Read: f.read, Bits: 64, Rate: 1e9}
}

// callRecovering calls op and returns what it panicked with, if anything.
func callRecovering(op func()) (escaped any) {
	defer func() { escaped = recover() }()
	op()
	return nil
}

// A Read that panics once inside any writer path leaves the clock usable:
// no panic reaches the caller, and afterwards (after a Resume, which
// brings a clock out of a Suspend, and is harmless otherwise) the clock
// moves 5 s when its counter moves 5 s.
func TestAPanickingReadNeverWedgesAWriterPath(t *testing.T) {
	paths := []struct {
		name string
		op   func(c *schedclock.Clock, f *flakySource) error
	}{
		{"Suspend", func(c *schedclock.Clock, _ *flakySource) error { return c.Suspend() }},
		{"Resume", func(c *schedclock.Clock, _ *flakySource) error { return c.Resume() }}, // suspended first, without a fault
		{"Update", func(c *schedclock.Clock, _ *flakySource) error { return c.Update() }},
		{"Register", func(c *schedclock.Clock, f *flakySource) error { return c.Register(f.source()) }},
	}
	for _, p := range paths {
		for _, at := range []int64{1, 2} { // the first or the second read of the path panics
			t.Run(fmt.Sprintf("%s/read%d", p.name, at), func(t *testing.T) {
				f := newFlaky(1e9, 64)
				c, err := schedclock.New(f.source())
				require.NoError(t, err)
				defer c.Close()
				f.m.Advance(time.Second)
				if p.name == "Resume" {
					require.NoError(t, c.Suspend())
				}
				f.skip.Store(at - 1) // let at-1 reads through, then panic once
				f.panics.Store(1)
				var opErr error
				escaped := callRecovering(func() { opErr = p.op(c, f) })
				assert.Nil(t, escaped, "the panic escaped %s", p.name)
				f.panics.Store(0)
				if opErr != nil {
					assert.Contains(t, opErr.Error(), "transient counter fault", "the error says what failed")
				}
				assert.Nil(t, callRecovering(func() { _ = c.Resume() }))
				before := c.Now()
				f.m.Advance(5 * time.Second)
				assert.Equal(t, 5*time.Second, time.Duration(c.Now()-before), "after a fault in %s, the clock must move with its counter", p.name)
				assert.Nil(t, callRecovering(func() { _ = c.Update() }))
				f.m.Advance(time.Second)
				assert.Equal(t, 6*time.Second, time.Duration(c.Now()-before))
			})
		}
	}
}

// A panic of the current source's Read while Register switches away from
// it is blamed on that source (ErrFault, counted in Info), not on the
// Source being registered, and leaves the clock on its counter.
func TestRegisterBlamesTheSourceThatPanicked(t *testing.T) {
	for _, at := range []int64{1, 2, 3} { // the pin, or a read relating the counters
		t.Run(fmt.Sprintf("read%d", at), func(t *testing.T) {
			f := newFlaky(1e9, 64)
			c, err := schedclock.New(f.source())
			require.NoError(t, err)
			defer c.Close()
			other := mustManual(1e9, 64)
			f.skip.Store(at - 1)
			f.panics.Store(1)
			err = c.Register(schedclock.Source{Name: "other", Read: other.Read, Bits: 64, Rate: 1e9})
			f.panics.Store(0)
			require.Error(t, err)
			assert.ErrorIs(t, err, schedclock.ErrFault)
			assert.NotErrorIs(t, err, schedclock.ErrInvalidSource, "the registered Source did nothing wrong")
			assert.Contains(t, err.Error(), `"flaky"`)
			in := c.Info()
			assert.Equal(t, "flaky", in.Source)
			assert.Equal(t, 1, in.Faults)
			assert.Contains(t, in.LastFault, "transient counter fault")
			before := c.Now()
			f.m.Advance(5 * time.Second)
			assert.Equal(t, 5*time.Second, time.Duration(c.Now()-before))
		})
	}
}

// A Read that keeps panicking for two refresh periods crashes nothing,
// Info counts the faults, and the clock keeps time afterwards.
func TestAReadPanickingForTwoRefreshPeriods(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var m atomic.Uint64
		var failing atomic.Bool
		src := schedclock.Source{Name: "failing", Bits: 32, Rate: 1e9, Read: func() uint64 {
			if failing.Load() {
				panic("counter unplugged")
			}
			return m.Load() & (1<<32 - 1)
		}}
		c, err := schedclock.New(src)
		require.NoError(t, err)
		defer c.Close()
		period := c.Info().RefreshPeriod
		failing.Store(true)
		// Two refresh periods of the clock's own, measured by the faults its
		// refresh reports rather than by a wall-clock budget.
		deadline := time.Now().Add(2*period + time.Minute)
		for c.Info().Faults < 2 && time.Now().Before(deadline) {
			bubbleSleep(period / 4)
		}
		in := c.Info()
		assert.GreaterOrEqual(t, in.Faults, 2, "the refresh's faults are counted")
		assert.Contains(t, in.LastFault, "counter unplugged")
		failing.Store(false)
		before := c.Now()
		m.Add(3e9) // within one wrap (4.29 s)
		assert.Equal(t, schedclock.Instant(3e9), c.Now()-before)
		require.NoError(t, c.Update())
		m.Add(3e9)
		assert.Equal(t, schedclock.Instant(6e9), c.Now()-before, "the fold after the faults must be exact")
	})
}

// Info reads a snapshot: it never waits for a reference the background
// goroutine is blocked in (here from its first call there on, the
// calibration's first measurement).
func TestInfoNeverWaitsForABlockedReference(t *testing.T) {
	release := make(chan struct{})
	var blocked atomic.Int64
	ref := func() int64 {
		if onBackground() {
			blocked.Add(1)
			<-release
		}
		return time.Now().UnixNano()
	}
	c, err := schedclock.New(schedclock.Portable(), schedclock.WithReference(ref))
	require.NoError(t, err)
	defer func() { close(release); _ = c.Close() }()
	for blocked.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	done := make(chan schedclock.Info)
	go func() { done <- c.Info() }()
	select {
	case in := <-done:
		assert.Equal(t, "portable", in.Source)
	case <-time.After(5 * time.Second): // a blocked Info never returns; a snapshot takes microseconds
		t.Fatal("Info waited for the blocked reference")
	}
}

// Time saturates: no value a clock returns maps before the clock's start.
func TestTimeNeverWraps(t *testing.T) {
	m := mustManual(1e9, 64)
	c, err := schedclock.New(m.Source())
	require.NoError(t, err)
	defer c.Close()
	for _, clk := range []*schedclock.Clock{c, schedclock.Default()} {
		start := clk.WallTime(clk.Now())
		for _, ns := range []schedclock.Instant{math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 / 2} {
			assert.False(t, clk.WallTime(ns).Before(start), "Time(%d) = %v, before the start %v", ns, clk.WallTime(ns), start)
		}
		assert.False(t, clk.WallTime(math.MaxInt64).Before(clk.WallTime(math.MaxInt64/2)))
	}
}

// Every accepted rate converts within 1 ppm, every real counter rate
// within 0.01 ppm; absurd ones are refused with ErrInvalidSource.
func TestRatesConvertWithinOnePPM(t *testing.T) {
	read := func() uint64 { return 0 }
	for _, hz := range []uint64{32768, 1e6, 24e6, 2_445_000_000, 6.4e9, 10e9} {
		c, err := schedclock.New(schedclock.Source{Name: "real", Read: read, Bits: 64, Rate: hz})
		require.NoError(t, err, "%d Hz", hz)
		assert.LessOrEqual(t, math.Abs(c.Info().ConversionErrorPPM), 0.01, "%d Hz", hz)
		require.NoError(t, c.Close())
	}
	for _, hz := range []uint64{1 << 61, 1 << 62, 1<<62 + 1, 1e15, 1e18, math.MaxUint64, 3e9 + 1, 999_999_937} {
		c, err := schedclock.New(schedclock.Source{Name: "absurd", Read: read, Bits: 64, Rate: hz})
		if err != nil {
			assert.ErrorIs(t, err, schedclock.ErrInvalidSource, "%d Hz", hz)
			continue
		}
		assert.LessOrEqual(t, math.Abs(c.Info().ConversionErrorPPM), 1.0, "%d Hz accepted", hz)
		require.NoError(t, c.Close())
	}
}

// Advance never moves a counter, nor the clock on it, back.
func TestAdvanceNeverMovesBack(t *testing.T) {
	// At 1.99 GHz one Advance of math.MaxInt64 reaches the top eighth of
	// the range without overflowing 64 bits: only the saturation below it
	// keeps the Clock from taking the counter for one that stepped back.
	for _, rate := range []uint64{1e9, 10e9, 32768, 1.99e9} {
		m := mustManual(rate, 64)
		c, err := schedclock.New(m.Source())
		require.NoError(t, err)
		m.Advance(time.Hour)
		prevCounter, prev := m.Read(), c.Now()
		for i := 0; i < 3; i++ {
			m.Advance(math.MaxInt64)
			assert.GreaterOrEqual(t, m.Read(), prevCounter, "%d Hz: the counter moved back", rate)
			now := c.Now()
			assert.GreaterOrEqual(t, now, prev, "%d Hz: Now moved back", rate)
			prevCounter, prev = m.Read(), now
			require.NoError(t, c.Update())
			assert.GreaterOrEqual(t, c.Now(), prev, "%d Hz: Now moved back across Update", rate)
		}
		require.NoError(t, c.Close())
	}
}

// runningRef is a reference that runs ppm faster than the time
// package's clock (a testing/synctest bubble's, in one).
func runningRef(ppm float64) func() int64 {
	start := time.Now()
	return func() int64 { return int64(float64(time.Since(start)) * (1 + ppm*1e-6)) }
}

// liveCounter is a 64-bit 1 GHz counter that follows the time package's
// clock (a testing/synctest bubble's, in one).
func liveCounter() schedclock.Source {
	start := time.Now()
	return schedclock.Source{Name: "real", Bits: 64, Rate: 1e9, Read: func() uint64 { return uint64(time.Since(start)) }}
}

// "Rate wins" compares declared rates: the very Source a clock was made
// on can be registered again after a reference refined its rate up.
func TestRegisterTheSameSourceAfterARefinement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := liveCounter()
		c, err := schedclock.New(src, schedclock.WithReference(runningRef(-20)))
		require.NoError(t, err)
		defer c.Close()
		for c.Info().RateOrigin != "refined" || c.Info().Rate <= 1e9 {
			bubbleSleep(10 * time.Millisecond)
		}
		assert.NoError(t, c.Register(src), "registering the same Source again, rate %d Hz", c.Info().Rate)
	})
}

// A reference that is stuck, jumps or panics is recognised: reported in
// Info, and not followed over and over. Each case runs in a
// testing/synctest bubble, whose clock the counter and the references
// read, and which the clock checks them against.
func TestMisbehavingReferences(t *testing.T) {
	t.Run("stuck", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, err := schedclock.New(liveCounter(), schedclock.WithReference(func() int64 { return 0 }))
			require.NoError(t, err)
			defer c.Close()
			bubbleSleep(2 * time.Second)
			in := c.Info()
			assert.LessOrEqual(t, in.Watch.Reanchors, 3, "a stuck reference re-anchored %d times: %s", in.Watch.Reanchors, in.Watch.LastReanchor)
			assert.Contains(t, in.Watch.Reference, "stuck")
		})
	})
	t.Run("jump", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var offset atomic.Int64
			base := time.Now()
			ref := func() int64 { return int64(time.Since(base)) + offset.Load() }
			c, err := schedclock.New(liveCounter(), schedclock.WithReference(ref))
			require.NoError(t, err)
			defer c.Close()
			bubbleSleep(300 * time.Millisecond)
			offset.Store(int64(time.Hour))
			before := c.Now()
			bubbleSleep(2 * time.Second)
			in := c.Info()
			assert.InDelta(t, 1e9, float64(in.Rate), 1000, "a reference's jump must not become a rate: %+v", in)
			assert.Less(t, c.Now()-before, schedclock.Instant(time.Minute), "the clock must not follow a reference's jump of 1 h")
			assert.Contains(t, in.Watch.Reference, "jumped")
		})
	})
	t.Run("jump past the int64 range", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// From near the bottom of the int64 range to near its top: the
			// difference overflows int64, and must read as the jump it is.
			var origin atomic.Int64
			origin.Store(math.MinInt64 + int64(time.Hour))
			base := time.Now()
			ref := func() int64 { return origin.Load() + int64(time.Since(base)) }
			c, err := schedclock.New(liveCounter(), schedclock.WithReference(ref))
			require.NoError(t, err)
			defer c.Close()
			bubbleSleep(300 * time.Millisecond)
			origin.Store(math.MaxInt64 - int64(time.Hour))
			bubbleSleep(time.Second)
			in := c.Info()
			assert.Contains(t, in.Watch.Reference, "jumped", "%+v", in)
			assert.InDelta(t, 1e9, float64(in.Rate), 1000)
		})
	})
	t.Run("panics", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, err := schedclock.New(liveCounter(), schedclock.WithReference(func() int64 { panic("reference on fire") }))
			require.NoError(t, err)
			defer c.Close()
			deadline := time.Now().Add(time.Minute)
			for c.Info().Faults == 0 && time.Now().Before(deadline) {
				bubbleSleep(10 * time.Millisecond)
			}
			in := c.Info()
			assert.Positive(t, in.Faults)
			assert.Contains(t, in.LastFault, "reference on fire")
			before := c.Now()
			bubbleSleep(10 * time.Millisecond)
			assert.Greater(t, c.Now(), before, "the clock keeps running on its counter")
		})
	})
}

// Closing the process-wide clock is refused, and it keeps running.
func TestTheDefaultClockCannotBeClosed(t *testing.T) {
	err := schedclock.Default().Close()
	assert.True(t, errors.Is(err, schedclock.ErrDefaultClock), "Close on the default clock: %v", err)
	before := schedclock.Now()
	time.Sleep(2 * time.Millisecond)
	assert.Greater(t, schedclock.Now(), before)
	assert.False(t, schedclock.Default().Info().Closed)
}

// User code that calls runtime.Goexit: t.Fatal, t.FailNow and testify's
// require do, so a test's fake Source or reference does it for real. The
// goroutine it runs on exits whatever the clock does; the clock must
// stay consistent, record the exit as a fault, and, where the goroutine
// is its own, go on with the work in another.

// onBackground reports whether the calling goroutine is a Clock's
// background goroutine.
func onBackground() bool {
	buf := make([]byte, 64<<10)
	return strings.Contains(string(buf[:runtime.Stack(buf, false)]), "schedclock.(*Clock).tick(")
}

// sixteenBits is a 16-bit, 65536 Hz counter that follows the time
// package's clock (a testing/synctest bubble's in one): it wraps every
// second, so a clock on it that is not folded for a second loses time and
// steps back.
func sixteenBits(read func()) schedclock.Source {
	start := time.Now()
	return schedclock.Source{Name: "16 bits", Bits: 16, Rate: 65536, Read: func() uint64 {
		read()
		return uint64(time.Since(start) * 65536 / time.Second)
	}}
}

// goexitOnce returns a function that calls runtime.Goexit the first time
// it is called on a background goroutine once armed is set, and reports
// in fired that it did.
func goexitOnce(armed, fired *atomic.Bool) func() {
	return func() {
		if armed.Load() && !fired.Load() && onBackground() && fired.CompareAndSwap(false, true) {
			runtime.Goexit()
		}
	}
}

// clockGoroutines counts the goroutines of the caller's testing/synctest
// bubble that run a Clock's background work.
func clockGoroutines() int { return schedclock.BubbleGoroutines("schedclock.runBackground(") }

// keepsTime reads c for d of a testing/synctest bubble's time: it never
// steps back, and it moves with the bubble's time to within a count of
// the 16-bit counter (a lost fold would cost a wrap).
func keepsTime(t *testing.T, c *schedclock.Clock, d time.Duration) {
	t.Helper()
	start, bubbleStart := c.Now(), time.Now()
	last := start
	for time.Since(bubbleStart) < d {
		now := c.Now()
		require.GreaterOrEqual(t, now, last, "Now stepped back after %v", time.Since(bubbleStart))
		last = now
		bubbleSleep(time.Millisecond)
	}
	moved, elapsed := time.Duration(c.Now()-start), time.Since(bubbleStart)
	assert.InDelta(t, float64(elapsed), float64(moved), float64(time.Second/65536+1), "the clock moved %v in %v", moved, elapsed)
}

// TestGoexitInTheBackground: a Read or a reference that calls
// runtime.Goexit on a clock's background goroutine, in a
// testing/synctest bubble, on a counter that wraps every second of it:
// the exit is counted, another goroutine goes on with the folds (the
// clock keeps time for 3 s), the clock has one background goroutine
// after it as before, and none after Close.
func TestGoexitInTheBackground(t *testing.T) {
	for _, where := range []string{"Read", "reference"} {
		t.Run(where, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var armed, fired atomic.Bool
				exit := goexitOnce(&armed, &fired)
				src := sixteenBits(func() {})
				var opts []schedclock.Option
				if where == "Read" {
					src = sixteenBits(exit)
				} else {
					opts = append(opts, schedclock.WithReference(func() int64 { exit(); return int64(time.Since(time.Time{})) }))
				}
				c, err := schedclock.New(src, opts...)
				require.NoError(t, err)
				// Closed only at the end: Close waits for the background
				// goroutine, which must not hang a test that found it gone.
				synctest.Wait()
				require.Equal(t, 1, clockGoroutines(), "the clock's goroutine")
				armed.Store(true)
				keepsTime(t, c, 3*time.Second)
				require.True(t, fired.Load(), "the %s never exited the background goroutine", where)
				in := c.Info()
				assert.GreaterOrEqual(t, in.Faults, 1)
				assert.Contains(t, in.LastFault, "Goexit")
				synctest.Wait() // the replacement blocked where it waits, not still on its way there
				assert.Equal(t, 1, clockGoroutines(), "the clock's goroutines after the exit")
				require.NoError(t, c.Close())
				synctest.Wait()
				assert.Zero(t, clockGoroutines(), "the clock's goroutines after Close")
			})
		})
	}
}

// exitsAfter is a 2 GHz Source whose Read exits its goroutine after
// reads reads.
func exitsAfter(reads int32) schedclock.Source {
	next := mustManual(2e9, 64)
	var left atomic.Int32
	left.Store(reads)
	return schedclock.Source{Name: "next", Bits: 64, Rate: 2e9, Read: func() uint64 {
		if left.Add(-1) < 0 {
			runtime.Goexit()
		}
		return next.Read()
	}}
}

// TestGoexitOnTheWriterPaths: a Read that exits the caller's goroutine
// in Register, Update, Suspend or Resume leaves the clock as it was (or
// as the call left it whole), the writer lock free, and the exit counted.
func TestGoexitOnTheWriterPaths(t *testing.T) {
	// inGoroutine runs f on a goroutine of its own, which the Read exits.
	inGoroutine := func(f func()) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			f()
		}()
		<-done
	}
	type path struct {
		name string
		// call is the writer call; exit is armed for it.
		call func(c *schedclock.Clock, m *schedclocktest.Manual, exit *atomic.Int32)
	}
	for _, p := range []path{
		{"Update", func(c *schedclock.Clock, _ *schedclocktest.Manual, exit *atomic.Int32) {
			exit.Store(1)
			_ = c.Update()
		}},
		{"Suspend", func(c *schedclock.Clock, _ *schedclocktest.Manual, exit *atomic.Int32) {
			exit.Store(1)
			_ = c.Suspend()
		}},
		{"Resume", func(c *schedclock.Clock, _ *schedclocktest.Manual, exit *atomic.Int32) {
			require.NoError(t, c.Suspend())
			exit.Store(1)
			_ = c.Resume() // left suspended, as a panic leaves it
		}},
		{"Register, the new Read at once", func(c *schedclock.Clock, _ *schedclocktest.Manual, exit *atomic.Int32) {
			_ = c.Register(exitsAfter(0)) // its first read, which checks it
		}},
		{"Register, the new Read mid-switch", func(c *schedclock.Clock, _ *schedclocktest.Manual, exit *atomic.Int32) {
			_ = c.Register(exitsAfter(1)) // the check passes; the switch's read exits
		}},
		{"Register, a slower Source's Read", func(c *schedclock.Clock, _ *schedclocktest.Manual, exit *atomic.Int32) {
			_ = c.Register(schedclock.Source{Name: "slower", Bits: 64, Rate: 1e6, Read: func() uint64 { runtime.Goexit(); return 0 }})
		}},
		{"Register, the old Read mid-switch", func(c *schedclock.Clock, _ *schedclocktest.Manual, exit *atomic.Int32) {
			next := mustManual(2e9, 64)
			exit.Store(1)
			_ = c.Register(next.Source())
		}},
	} {
		t.Run(p.name, func(t *testing.T) {
			m := mustManual(1e9, 64)
			var exit atomic.Int32
			c, err := schedclock.New(schedclock.Source{Name: "manual, exits", Bits: 64, Rate: 1e9, Read: func() uint64 {
				if exit.Load() > 0 && exit.Add(-1) == 0 {
					runtime.Goexit()
				}
				return m.Read()
			}})
			require.NoError(t, err)
			defer c.Close()
			m.Advance(time.Second)
			before, info := c.Now(), c.Info()
			inGoroutine(func() { p.call(c, m, &exit) })
			exit.Store(0)
			after := c.Info()
			assert.Equal(t, info.Faults+1, after.Faults, "the exit is counted")
			assert.Contains(t, after.LastFault, "Goexit")
			assert.Equal(t, info.Source, after.Source, "the source")
			assert.Equal(t, p.name == "Resume", after.Suspended, "suspended")
			if after.Suspended {
				require.NoError(t, c.Resume())
			}
			// The clock goes on from where it was, the lock free.
			now := c.Now()
			assert.GreaterOrEqual(t, now, before)
			m.Advance(time.Second)
			require.NoError(t, c.Update())
			assert.Equal(t, now.Add(time.Second), c.Now(), "the clock follows its counter again")
		})
	}
}
