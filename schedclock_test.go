package schedclock_test

import (
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
func exactNanos(cycles uint64, info schedclock.Info) schedclock.Instant {
	v := new(big.Int).SetUint64(cycles)
	v.Mul(v, big.NewInt(int64(info.Mult)))
	v.Rsh(v, uint(info.Shift))
	return schedclock.Instant(v.Int64())
}

func TestNewStartsNearZero(t *testing.T) {
	f := &schedclock.FakeCounter{}
	f.Set(123456789)
	c, err := schedclock.New(f.Source("fake", 64, ghz))
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, schedclock.Instant(0), c.Now())
	f.Add(1500)
	assert.Equal(t, schedclock.Instant(1500), c.Now())

	p, err := schedclock.New(schedclock.Portable())
	require.NoError(t, err)
	defer p.Close()
	first := p.Now()
	assert.GreaterOrEqual(t, first, schedclock.Instant(0))
	assert.Less(t, first, schedclock.Instant(time.Second))
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
	assert.Equal(t, schedclock.Instant(20), c.Now())
	// Mutators are refused or do nothing, and change nothing.
	g := &schedclock.FakeCounter{}
	assert.ErrorIs(t, c.Register(g.Source("g", 64, 2*ghz)), schedclock.ErrClosed)
	c.Update()
	c.Suspend()
	assert.False(t, c.Info().Suspended)
	c.Resume()
	assert.Equal(t, "fake", c.Info().Source)
	f.Add(10)
	assert.Equal(t, schedclock.Instant(30), c.Now())

	// No goroutine is left behind.
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), base)
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
				now := int64(c.Now())
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
	assert.Equal(t, schedclock.Instant(0), c.Now())
	f := &schedclock.FakeCounter{}
	assert.ErrorIs(t, c.Register(f.Source("f", 64, ghz)), schedclock.ErrClosed)
	c.Update()
	c.Suspend()
	c.Resume()
	assert.ErrorIs(t, c.Close(), schedclock.ErrClosed)
	assert.Equal(t, schedclock.Instant(0), c.Now())
	assert.Equal(t, "", c.Info().Source)
	assert.True(t, c.Info().Closed)

	var j schedclock.Jiffies
	j.Stop()
	assert.Equal(t, uint64(0), j.Read())
	_, err := schedclock.New(j.Source())
	assert.ErrorIs(t, err, schedclock.ErrInvalidSource, "a zero Jiffies has no rate")
}
