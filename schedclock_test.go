package schedclock_test

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
)

const ghz = 1_000_000_000

// newFake returns a running clock on a fake counter of the given width and
// rate, closed when the test ends.
func newFake(t *testing.T, bits int, rate uint64) (*schedclock.Clock, *schedclock.FakeCounter) {
	t.Helper()
	f := &schedclock.FakeCounter{}
	c, err := schedclock.New(f.Source("fake", bits, rate))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c, f
}

// exactNanos is cycles*mult >> shift in arbitrary precision: what a clock
// started at counter 0 must read after cycles, however many updates came
// in between.
func exactNanos(cycles uint64, info schedclock.Info) int64 {
	v := new(big.Int).SetUint64(cycles)
	v.Mul(v, big.NewInt(int64(info.Mult)))
	v.Rsh(v, uint(info.Shift))
	return v.Int64()
}

func TestNewStartsNearZero(t *testing.T) {
	f := &schedclock.FakeCounter{}
	f.Set(123456789)
	c, err := schedclock.New(f.Source("fake", 64, ghz))
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, int64(0), c.Now())
	f.Add(1500)
	assert.Equal(t, int64(1500), c.Now())

	p, err := schedclock.New(schedclock.Portable())
	require.NoError(t, err)
	defer p.Close()
	first := p.Now()
	assert.GreaterOrEqual(t, first, int64(0))
	assert.Less(t, first, int64(time.Second))
}

// TestSevenSecondsOfCounts reads seven seconds' worth of counts at
// several rates: the conversion itself must be within 2 ns + 0.01 ppm
// of the exact value (the kernel's maxsec-3600 mult/shift was off by up
// to 0.6 ppm, 4 µs here).
func TestSevenSecondsOfCounts(t *testing.T) {
	for _, rate := range []uint64{24_000_000, ghz, 3 * ghz, 10 * ghz} {
		c, f := newFake(t, 64, rate)
		f.Set(7 * rate)
		want := 7 * time.Second
		assert.InDelta(t, float64(want), float64(c.Now()), 2+0.01e-6*float64(want), "%d Hz", rate)
		assert.LessOrEqual(t, math.Abs(c.Info().ConversionErrorPPM), 0.01, "%d Hz", rate)
		// Folding does not change it.
		c.Update()
		f.Add(rate)
		assert.InDelta(t, float64(8*time.Second), float64(c.Now()), 2+0.01e-6*float64(8*time.Second), "%d Hz", rate)
	}
}

func TestRefreshPeriod(t *testing.T) {
	// A counter that wraps is folded eight times per wrap (mask+1
	// cycles), so that a refresh may run 3/4 of the wrap late; a 64-bit
	// one at the kernel's clocks_calc_max_nsecs, half of the cycles
	// before delta*mult overflows.
	for _, tc := range []struct {
		bits   int
		rate   uint64
		period time.Duration
	}{
		{8, 100, 2560 * time.Millisecond / 8},
		{16, 62500, 65536 * 16 * time.Microsecond / 8},
		{32, 1000, time.Duration(uint64(1<<32)*uint64(time.Millisecond)) / 8},
		{64, ghz, (1<<33 - 1) / 2}, // mult 2^31, shift 31: 2^33-1 cycles to overflow
	} {
		c, _ := newFake(t, tc.bits, tc.rate)
		assert.Equal(t, tc.period, c.Info().RefreshPeriod, "%d bits at %d Hz", tc.bits, tc.rate)
	}
}

func TestInvalidSourcesAreRefused(t *testing.T) {
	f := &schedclock.FakeCounter{}
	for name, src := range map[string]schedclock.Source{
		"nil read":  {Name: "x", Bits: 64, Rate: ghz},
		"0 bits":    f.Source("x", 0, ghz),
		"65 bits":   f.Source("x", 65, ghz),
		"-1 bits":   f.Source("x", -1, ghz),
		"0 Hz":      f.Source("x", 64, 0),
		"too fast":  f.Source("x", 1, ghz), // a 1-bit counter at 1 GHz wraps every 2 ns
		"rate 2^64": f.Source("x", 64, ^uint64(0)),
	} {
		c, err := schedclock.New(src)
		assert.Nil(t, c, name)
		assert.ErrorIs(t, err, schedclock.ErrInvalidSource, name)
	}

	// A refused Register changes nothing.
	c, fc := newFake(t, 64, ghz)
	fc.Add(1000)
	before := c.Info()
	for _, src := range []schedclock.Source{{Name: "nil", Bits: 64, Rate: 2 * ghz}, f.Source("x", 65, 2*ghz), f.Source("x", 64, 0)} {
		assert.ErrorIs(t, c.Register(src), schedclock.ErrInvalidSource)
	}
	assert.Equal(t, before, c.Info())
	assert.Equal(t, int64(1000), c.Now())
	fc.Add(1)
	assert.Equal(t, int64(1001), c.Now())
}

func TestUpdateNeverMovesTime(t *testing.T) {
	// 24 MHz: mult is not exact, so each update has a remainder to carry.
	c, f := newFake(t, 64, 24_000_000)
	info := c.Info()
	var total uint64
	step := uint64(1)
	for i := 0; i < 2000; i++ {
		step = step*6364136223846793005 + 1442695040888963407
		d := step>>40 | 1
		f.Add(d)
		total += d
		before := c.Now()
		c.Update()
		assert.Equal(t, before, c.Now(), "update %d moved time", i)
		require.Equal(t, exactNanos(total, info), before, "after %d updates and %d cycles", i, total)
	}
}

func TestWrapsAreFoldedByUpdate(t *testing.T) {
	for _, bits := range []int{8, 16} {
		c, f := newFake(t, bits, 100)
		info := c.Info()
		mask := uint64(1)<<bits - 1
		// Advance by just under half the refresh window each time, so
		// every wrap is folded, across many wraps.
		step := uint64(info.RefreshPeriod) / uint64(10*time.Millisecond)
		require.NotZero(t, step)
		var total uint64
		for i := 0; i < 50; i++ {
			f.Set((f.Value() + step) & mask)
			total += step
			c.Update()
			require.Equal(t, exactNanos(total, info), c.Now(), "%d-bit after %d cycles", bits, total)
		}
		assert.Greater(t, total, 3*mask, "the test must cross several wraps")
	}
}

// realCounter returns a counter that counts at rate Hz from start, masked
// to bits; before is called at the start of every read (nil: nothing).
func realCounter(name string, start time.Time, bits int, rate uint64, before func()) schedclock.Source {
	mask := ^uint64(0) >> (64 - bits)
	return schedclock.Source{Name: name, Bits: bits, Rate: rate, Read: func() uint64 {
		if before != nil {
			before()
		}
		el := uint64(time.Since(start))
		return (el/1e9*rate + el%1e9*rate/1e9) & mask
	}}
}

// realtimeCounter counts at rate from a start time, masked to bits: a
// narrow hardware counter that nobody advances by hand.
func realtimeCounter(bits int, rate uint64) schedclock.Source {
	start := time.Now()
	mask := uint64(1)<<bits - 1
	return schedclock.Source{Name: "realtime", Bits: bits, Rate: rate, Read: func() uint64 {
		return uint64(time.Since(start)) * rate / ghz & mask
	}}
}

func TestRefresherNeverLosesAWrap(t *testing.T) {
	for _, tc := range []struct {
		bits int
		rate uint64
	}{{8, 300}, {16, 90_000}} {
		t.Run("", func(t *testing.T) {
			t.Parallel()
			c, err := schedclock.New(realtimeCounter(tc.bits, tc.rate))
			require.NoError(t, err)
			defer c.Close()
			wrap := time.Duration(uint64(1) << tc.bits * ghz / tc.rate)
			start := time.Now()
			startNs := c.Now()
			last := startNs
			for time.Since(start) < 3*wrap {
				now := c.Now()
				require.GreaterOrEqual(t, now, last, "time went backwards")
				last = now
				time.Sleep(wrap / 50)
			}
			elapsed := time.Since(start)
			got := time.Duration(c.Now() - startNs)
			tick := time.Duration(ghz / tc.rate)
			// A lost wrap would be a whole wrap period missing.
			assert.InDelta(t, float64(elapsed), float64(got), float64(wrap/8+2*tick),
				"elapsed %v, clock advanced %v (wrap every %v)", elapsed, got, wrap)
		})
	}
}

// Counters that wrap faster than the Go scheduler can be trusted to run
// the refresh goroutine are refused.
func TestTooFastNarrowCountersAreRefused(t *testing.T) {
	f := &schedclock.FakeCounter{}
	for _, src := range []schedclock.Source{f.Source("8-bit 5 kHz", 8, 5000), f.Source("16-bit 2 MHz", 16, 2_000_000)} {
		_, err := schedclock.New(src)
		assert.ErrorIs(t, err, schedclock.ErrInvalidSource, src.Name)
	}
}

// A narrow counter the clock accepts never loses a wrap, even with
// GOMAXPROCS=1 and a goroutine that never yields.
func TestNarrowCounterSurvivesABusyGoroutine(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	// 16 bits at 90 kHz wrap every 728 ms: among the narrowest accepted.
	src := realCounter("narrow", time.Now(), 16, 90_000, nil)
	c, err := schedclock.New(src)
	require.NoError(t, err)
	defer c.Close()
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		x := 0
		for !stop.Load() {
			x++
		}
	}()
	start := time.Now()
	c0 := c.Now()
	last := c0
	backwards := 0
	// The one stall no goroutine can help is the OS's: a process
	// descheduled (a loaded VM host) for longer than a fold may be late
	// comes back to a counter no fold has seen for 3/4 of a wrap, and the
	// Source doc says a Now may then step back. A busy goroutine that
	// kept the fold from running would show as a gap in the reading loop
	// too, but one during which the process used its CPU, as would a
	// process merely slowed by others beside it; an OS stall is a gap
	// during which it used almost none (under a tenth of it). Only that
	// excuses a step.
	tolerated := c.Info().RefreshPeriod * 6 // 7/8 of the wrap less a refresh period
	var stalled time.Duration
	prev := time.Now()
	prevCPU, _ := processCPU()
	for time.Since(start) < 2*time.Second {
		now := c.Now()
		if now < last {
			backwards++
		}
		last = now
		at := time.Now()
		cpu, ok := processCPU()
		if gap := at.Sub(prev); ok && gap > tolerated && cpu-prevCPU < gap/10 {
			stalled = max(stalled, gap)
		}
		prev, prevCPU = at, cpu
	}
	elapsed := time.Since(start)
	got := time.Duration(c.Now() - c0)
	stop.Store(true)
	wg.Wait()
	if stalled == 0 {
		assert.Zero(t, backwards)
	} else {
		t.Logf("the OS stopped the process for %v (a fold may be %v late): %d steps back", stalled, tolerated, backwards)
	}
	// Even across such a stall the next fold adds back any wrap lost.
	assert.InDelta(t, float64(elapsed), float64(got), float64(time.Millisecond), "elapsed %v, clock %v: a wrap was lost", elapsed, got)
}

func TestCounterSteppingBackwardsIsClamped(t *testing.T) {
	c, f := newFake(t, 64, ghz)
	f.Set(10_000)
	c.Update()
	assert.Equal(t, int64(10_000), c.Now())
	// Below the epoch: read as a negative delta, clamped to the epoch,
	// never as a jump of centuries.
	f.Set(9_000)
	assert.Equal(t, int64(10_000), c.Now())
	f.Set(0)
	assert.Equal(t, int64(10_000), c.Now())
	// An update there re-anchors: time goes on from the epoch value.
	c.Update()
	assert.Equal(t, int64(10_000), c.Now())
	f.Set(500)
	assert.Equal(t, int64(10_500), c.Now())

	// Narrow counters too: an 8-bit counter one count behind its epoch
	// reads as 255 counts ahead without the clamp.
	c8, f8 := newFake(t, 8, 100)
	f8.Set(100)
	c8.Update()
	at := c8.Now()
	f8.Set(99)
	assert.Equal(t, at, c8.Now())
}

// Saturation: no counter value makes Now wrap int64 or fall below the
// epoch.
func TestNowSaturates(t *testing.T) {
	c, f := newFake(t, 64, ghz)
	f.Set(5000)
	c.Update()
	require.Equal(t, int64(5000), c.Now())
	f.StepBack(1<<61 + 1) // just outside the negative zone: 2^64-2^61-1 cycles ahead
	assert.Equal(t, int64(math.MaxInt64), c.Now())
	f.Set(math.MaxUint64) // inside it: below the epoch
	assert.Equal(t, int64(5000), c.Now())
	c24, f24 := newFake(t, 64, 24_000_000)
	f24.Set(1 << 62)
	assert.Equal(t, int64(math.MaxInt64), c24.Now())
}

func TestStalledRefresherTakesThe128BitPath(t *testing.T) {
	for _, rate := range []uint64{ghz, 3 * ghz, 24_000_000} {
		c, f := newFake(t, 64, rate)
		info := c.Info()
		// Far past the point where delta*mult overflows 64 bits: for
		// 3 GHz that is after about 2.4 hours; this is 2^44 cycles on top
		// of a first step, hours to days of counter time.
		for _, cycles := range []uint64{1 << 30, 1<<44 + 12345, 1<<50 + 1} {
			f.Set(cycles)
			require.Equal(t, exactNanos(cycles, info), c.Now(), "%d Hz after %d cycles", rate, cycles)
		}
		// An update folds it all in, exactly.
		c.Update()
		assert.Equal(t, exactNanos(1<<50+1, info), c.Now())
		f.Add(rate)
		assert.Equal(t, exactNanos(1<<50+1+rate, info), c.Now())
	}
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
	assert.InDelta(t, before+1000, c.Now(), 1)

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
	assert.Equal(t, int64(70*time.Millisecond), before)
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
	for rc.Now() <= int64(5*time.Millisecond) && time.Since(waitStart) < time.Minute {
		time.Sleep(time.Millisecond)
	}
	last := rc.Now()
	assert.Greater(t, last, int64(5*time.Millisecond), "jiffies did not advance in %v", time.Since(waitStart))
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
	assert.Equal(t, int64(200), c.Now(), "the old source must still drive the clock")
}

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
	assert.Equal(t, int64(1000), c.Now(), "still suspended")
	c.Resume()
	assert.Equal(t, int64(1000), c.Now())
	b.Add(2000)
	assert.Equal(t, int64(2000), c.Now())
}

func TestClose(t *testing.T) {
	base := runtime.NumGoroutine()
	f := &schedclock.FakeCounter{}
	c, err := schedclock.New(f.Source("fake", 64, ghz))
	require.NoError(t, err)
	f.Add(10)
	require.NoError(t, c.Close())
	assert.ErrorIs(t, c.Close(), schedclock.ErrClosed)
	assert.True(t, c.Info().Closed)

	// Now keeps answering.
	f.Add(10)
	assert.Equal(t, int64(20), c.Now())
	// Mutators are refused or do nothing, and change nothing.
	g := &schedclock.FakeCounter{}
	assert.ErrorIs(t, c.Register(g.Source("g", 64, 2*ghz)), schedclock.ErrClosed)
	c.Update()
	c.Suspend()
	assert.False(t, c.Info().Suspended)
	c.Resume()
	assert.Equal(t, "fake", c.Info().Source)
	f.Add(10)
	assert.Equal(t, int64(30), c.Now())

	// No goroutine is left behind.
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), base)
}

func TestJiffies(t *testing.T) {
	_, err := schedclock.NewJiffies(0)
	assert.ErrorIs(t, err, schedclock.ErrInvalidSource)
	_, err = schedclock.NewJiffies(schedclock.MaxHZ + 1)
	assert.ErrorIs(t, err, schedclock.ErrInvalidSource)

	j, err := schedclock.NewJiffies(1000)
	require.NoError(t, err)
	time.Sleep(30 * time.Millisecond)
	j.Stop()
	n := j.Read()
	assert.GreaterOrEqual(t, n, uint64(20))
	assert.LessOrEqual(t, n, uint64(1000), "a stopped 1000 Hz counter counted %d in 30 ms", n)
	time.Sleep(5 * time.Millisecond)
	assert.Equal(t, n, j.Read(), "a stopped counter must not move")
	j.Stop() // idempotent
	src := j.Source()
	assert.Equal(t, uint64(1000), src.Rate)
	assert.Equal(t, n, src.Read())
}

func TestNowAllocatesNothing(t *testing.T) {
	c, f := newFake(t, 64, ghz)
	assert.Zero(t, testing.AllocsPerRun(1000, func() { f.Add(1); c.Now() }))
	assert.Zero(t, testing.AllocsPerRun(1000, func() { schedclock.Now() }))
	c.Suspend()
	assert.Zero(t, testing.AllocsPerRun(1000, func() { c.Now() }))
}

// TestNowIsMonotonicUnderConcurrentWriters hammers a clock with readers
// while a writer switches sources and rates, suspends, resumes and
// updates as fast as it can. Every reader checks that it never gets less
// than a value some reader returned before its call began (happens-before
// order, across goroutines).
func TestNowIsMonotonicUnderConcurrentWriters(t *testing.T) {
	// GOMAXPROCS=1 is DESIGN's worst case: the writer is preempted (by
	// the scheduler's async preemption) in the middle of its steps and
	// readers then run on the very P it left.
	for _, procs := range []int{1, runtime.NumCPU()} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			monotonicUnderConcurrentWriters(t)
		})
	}
}

func monotonicUnderConcurrentWriters(t *testing.T) {
	var trueTime atomic.Uint64
	counters := make([]schedclock.Source, 4)
	rates := []uint64{100, 24_000_000, ghz, 3 * ghz}
	for i, r := range rates {
		r := r
		// Each counter follows trueTime at its own real rate.
		counters[i] = schedclock.Source{Name: "c", Bits: 64, Rate: r, Read: func() uint64 {
			hi, lo := bits.Mul64(trueTime.Load(), r) // no overflow, however long it runs
			q, _ := bits.Div64(hi, lo, ghz)
			return q
		}}
	}
	c, err := schedclock.New(counters[0])
	require.NoError(t, err)
	defer c.Close()

	var stop atomic.Bool
	var highest, reads atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				floor := highest.Load()
				now := c.Now()
				reads.Add(1)
				if now < floor {
					errs <- "backwards"
					return
				}
				for cur := highest.Load(); now > cur && !highest.CompareAndSwap(cur, now); cur = highest.Load() {
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			trueTime.Add(37)
		}
	}()
	deadline := time.Now().Add(500 * time.Millisecond)
	ops := 0
	for ; time.Now().Before(deadline); ops++ {
		i := ops
		switch i % 5 {
		case 0, 1:
			// Rates only go up through Register; start over when at the top.
			next := counters[(i/5)%len(counters)]
			if err := c.Register(next); err != nil {
				require.ErrorIs(t, err, schedclock.ErrSlowerSource)
			}
		case 2:
			c.Update()
		case 3:
			c.Suspend()
		case 4:
			c.Resume()
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	assert.Greater(t, ops, 100, "writer operations")
	assert.Greater(t, reads.Load(), int64(1000), "readings")
}

func TestZeroClockIsInertNotAPanic(t *testing.T) {
	var c schedclock.Clock
	assert.Equal(t, int64(0), c.Now())
	f := &schedclock.FakeCounter{}
	assert.ErrorIs(t, c.Register(f.Source("f", 64, ghz)), schedclock.ErrClosed)
	c.Update()
	c.Suspend()
	c.Resume()
	assert.ErrorIs(t, c.Close(), schedclock.ErrClosed)
	assert.Equal(t, int64(0), c.Now())
	assert.Equal(t, "", c.Info().Source)
	assert.True(t, c.Info().Closed)

	var j schedclock.Jiffies
	j.Stop()
	assert.Equal(t, uint64(0), j.Read())
	_, err := schedclock.New(j.Source())
	assert.ErrorIs(t, err, schedclock.ErrInvalidSource, "a zero Jiffies has no rate")
}

// TestHostileCounters runs counters of every width and a wide range of
// rates through what real counters do wrong: steps back by one tick, by
// as much as still reads as negative, and by one tick more; and a
// refresher stalled far past the 64-bit overflow horizon. Now must equal
// the definition (big-integer arithmetic, saturated at math.MaxInt64),
// never fall below the epoch, and never wrap.
func TestHostileCounters(t *testing.T) {
	for _, bits := range []int{1, 8, 16, 63, 64} {
		for _, rate := range []uint64{1, 32768, 24_000_000, ghz, 10 * ghz} {
			name := fmt.Sprintf("%d bits at %d Hz", bits, rate)
			f := &schedclock.FakeCounter{}
			c, err := schedclock.New(f.Source("hostile", bits, rate))
			wrap := new(big.Int).Lsh(big.NewInt(1), uint(bits))
			wrap.Mul(wrap, big.NewInt(ghz)).Div(wrap, new(big.Int).SetUint64(rate))
			if err != nil {
				// Only counters that wrap too fast for the refresh
				// goroutine are refused.
				assert.ErrorIs(t, err, schedclock.ErrInvalidSource, name)
				assert.True(t, wrap.Cmp(big.NewInt(int64(667*time.Millisecond))) < 0, "%s refused: %v", name, err)
				continue
			}
			info := c.Info()
			mask := ^uint64(0) >> (64 - bits)
			// Forward, folding within each refresh period: exact.
			step := max(1, uint64(info.RefreshPeriod)*rate/ghz/2)
			var total uint64
			for i := 0; i < 5; i++ {
				total += step
				f.Set(total & mask)
				c.Update()
			}
			at := c.Now()
			require.Equal(t, exactNanos(total, info), at, name)
			epoch := total & mask
			for _, back := range []uint64{1, mask >> 3, mask>>3 + 1} {
				f.Set((epoch - back) & mask)
				now := c.Now()
				assert.GreaterOrEqual(t, now, at, "%s, %d cycles back: below the epoch", name, back)
				switch {
				case bits < 4:
					// No negative zone: a step back reads as a step forward.
				case back <= mask>>3:
					assert.Equal(t, at, now, "%s, %d cycles back: not clamped to the epoch", name, back)
				default:
					// Just outside the negative zone: read as far ahead.
					assert.Equal(t, saturatedNanos(total, mask-back+1, info), now, "%s, %d cycles back", name, back)
				}
			}
			if bits >= 63 {
				// Stalled far past the overflow horizon: the 128-bit path,
				// then saturation.
				for _, ahead := range []uint64{1 << 40, 1 << 52, 1 << 62} {
					f.Set((epoch + ahead) & mask)
					assert.Equal(t, saturatedNanos(total, ahead, info), c.Now(), "%s, %d cycles ahead", name, ahead)
				}
			}
			require.NoError(t, c.Close())
		}
	}
}

// saturatedNanos is the clock's value, from a start at counter 0, when the
// counter is ahead cycles past an epoch folded at total cycles: the
// definition, saturated at math.MaxInt64.
func saturatedNanos(total, ahead uint64, info schedclock.Info) int64 {
	v := new(big.Int).SetUint64(total)
	v.Add(v, new(big.Int).SetUint64(ahead))
	v.Mul(v, big.NewInt(int64(info.Mult)))
	v.Rsh(v, uint(info.Shift))
	if !v.IsInt64() {
		return math.MaxInt64
	}
	return v.Int64()
}

// Register from outside: the promises a switch between counters keeps.

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
