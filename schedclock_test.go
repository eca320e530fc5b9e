package schedclock_test

import (
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
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

// TestRefresherNeverLosesAWrap: a narrow counter that follows a
// testing/synctest bubble's time (8 bits at 300 Hz, 16 bits at 90 kHz),
// read every fiftieth of a wrap for three wraps, is folded by the clock's
// background goroutine on schedule: no step back, and the clock moves
// with the counter's time to within a count. In the bubble the schedule
// is the whole story (its fake time moves only when every goroutine
// waits, so no load can make a fold late); what a busy goroutine or the
// OS does to the folds is TestNarrowCounterSurvivesABusyGoroutine's.
func TestRefresherNeverLosesAWrap(t *testing.T) {
	for _, tc := range []struct {
		bits int
		rate uint64
	}{{8, 300}, {16, 90_000}} {
		t.Run(fmt.Sprintf("%d bits at %d Hz", tc.bits, tc.rate), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, err := schedclock.New(realCounter("bubble", time.Now(), tc.bits, tc.rate, nil))
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
					bubbleSleep(wrap / 50)
				}
				elapsed := time.Since(start)
				got := time.Duration(c.Now() - startNs)
				tick := time.Duration(ghz / tc.rate)
				// A lost wrap would be a whole wrap period missing.
				assert.InDelta(t, float64(elapsed), float64(got), float64(tick),
					"elapsed %v, clock advanced %v (wrap every %v)", elapsed, got, wrap)
			})
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

// TestCloseDoesNotWaitForTheLoopsNextLook: Close wakes the background
// goroutine, which then ends, rather than waiting for its next look at
// the schedule, a fold period away on the portable source. In a
// testing/synctest bubble, whose time moves only while every goroutine
// waits: a Close that waited for the loop's timer would take the rest
// of the period, one that kicks the loop takes no time at all.
func TestCloseDoesNotWaitForTheLoopsNextLook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, err := schedclock.New(schedclock.Portable())
		require.NoError(t, err)
		period := c.Info().RefreshPeriod
		bubbleSleep(period / 100) // the loop has looked once and sleeps until the next fold
		synctest.Wait()
		start := time.Now()
		require.NoError(t, c.Close())
		took := time.Since(start)
		t.Logf("Close took %v; the loop's next look was at most %v away", took, period)
		assert.Less(t, took, period/2, "Close waited for the background goroutine's next look")
	})
}

func TestClose(t *testing.T) {
	synctest.Test(t, testClose)
}

// testClose runs in a testing/synctest bubble: once every other
// goroutine of the bubble has ended or waits for good (synctest.Wait),
// the clock's must have ended.
func testClose(t *testing.T) {
	base := schedclock.BubbleGoroutines("")
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
	synctest.Wait()
	assert.Equal(t, base, schedclock.BubbleGoroutines(""), "the bubble's goroutines after Close")
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
	// A count of writes and readings, not a duration: what a loaded
	// machine changes is how long they take.
	ops := 0
	for ; ops < 1000 || reads.Load() < 10_000; ops++ {
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
	t.Logf("%d writer operations under %d readings", ops, reads.Load())
}

// TestZeroJiffiesIsInertNotAPanic: a zero Jiffies reads 0, stops, and
// is refused as a Source (a zero Clock is the default clock:
// TestNilAndZeroClocksAreTheDefault).
func TestZeroJiffiesIsInertNotAPanic(t *testing.T) {
	var j schedclock.Jiffies
	j.Stop()
	assert.Equal(t, uint64(0), j.Read())
	_, err := schedclock.New(j.Source())
	assert.ErrorIs(t, err, schedclock.ErrInvalidSource, "a zero Jiffies has no rate")
}

// reenterTimeout is how long a writer call may take before the test
// calls it hung: the writer waiting for its own lock.
const reenterTimeout = 10 * time.Second

// TestAReadReenteringTheWriter: a Source's Read that calls a writer
// method (Update, Register, Suspend, Resume, Close) of the very clock
// whose writer is running it gets an error, ErrReentered, instead of
// waiting forever for the lock its own goroutine holds; the writer that
// called the Read completes, and the clock goes on, its lock free. Each
// writer path that reads the counter is tried: Update, Suspend, Resume,
// and Register with the new Source's Read re-entering.
func TestAReadReenteringTheWriter(t *testing.T) {
	nested := map[string]func(c *schedclock.Clock) error{
		"Update":   (*schedclock.Clock).Update,
		"Suspend":  (*schedclock.Clock).Suspend,
		"Resume":   (*schedclock.Clock).Resume,
		"Register": func(c *schedclock.Clock) error { return c.Register(schedclock.Portable()) },
		"Close":    (*schedclock.Clock).Close,
	}
	type outer struct {
		name string
		// call arms the Read (arm) and makes the writer call; src is a
		// Source whose Read re-enters once armed.
		call func(c *schedclock.Clock, src schedclock.Source, arm func()) error
		// onSrc says the clock runs on src (otherwise on a plain Manual,
		// and call registers src).
		onSrc bool
	}
	outers := []outer{
		{"Update", func(c *schedclock.Clock, _ schedclock.Source, arm func()) error { arm(); return c.Update() }, true},
		{"Suspend", func(c *schedclock.Clock, _ schedclock.Source, arm func()) error { arm(); return c.Suspend() }, true},
		{"Resume", func(c *schedclock.Clock, _ schedclock.Source, arm func()) error {
			if err := c.Suspend(); err != nil {
				return err
			}
			arm()
			return c.Resume()
		}, true},
		{"Register", func(c *schedclock.Clock, src schedclock.Source, arm func()) error { arm(); return c.Register(src) }, false},
	}
	for _, o := range outers {
		for name, call := range nested {
			t.Run(o.name+"/"+name, func(t *testing.T) {
				m := mustManual(1e9, 64)
				var c *schedclock.Clock
				var armed atomic.Bool
				nestedErr := make(chan error, 1)
				src := schedclock.Source{Name: "re-entering", Bits: 64, Rate: 1e9, Read: func() uint64 {
					if armed.CompareAndSwap(true, false) {
						nestedErr <- call(c)
					}
					return m.Read()
				}}
				var err error
				if o.onSrc {
					c, err = schedclock.New(src)
				} else {
					c, err = schedclock.New(m.Source())
				}
				require.NoError(t, err)
				m.Advance(time.Second)
				done := make(chan error, 1)
				go func() { done <- o.call(c, src, func() { armed.Store(true) }) }()
				select {
				case err = <-done:
				case <-time.After(reenterTimeout):
					t.Fatalf("%s, whose Read calls %s: hung for %v (the writer waits for the lock it holds)", o.name, name, reenterTimeout)
				}
				assert.NoError(t, err, "%s itself", o.name)
				require.Len(t, nestedErr, 1, "the Read re-entered")
				nErr := <-nestedErr
				assert.ErrorIs(t, nErr, schedclock.ErrReentered, "%s from the Read of %s", name, o.name)
				// The lock is free: every writer answers.
				before := c.Now()
				if c.Info().Suspended {
					assert.NoError(t, c.Resume())
				}
				assert.NoError(t, c.Update())
				assert.GreaterOrEqual(t, c.Now(), before)
				assert.NoError(t, c.Close())
			})
		}
	}
}

// TestAReferenceReenteringTheWriter: a reference (WithReference) that
// calls the clock's Update from the background goroutine gets an error
// instead of hanging that goroutine for good with the lock held.
func TestAReferenceReenteringTheWriter(t *testing.T) {
	m := mustManual(1e9, 64)
	var c *schedclock.Clock
	var armed atomic.Bool
	nestedErr := make(chan error, 1)
	start := time.Now()
	ref := func() int64 {
		if armed.CompareAndSwap(true, false) {
			nestedErr <- c.Update()
		}
		return int64(time.Since(start))
	}
	c, err := schedclock.New(m.Source(), schedclock.WithReference(ref))
	require.NoError(t, err)
	armed.Store(true)
	select {
	case err = <-nestedErr:
		assert.ErrorIs(t, err, schedclock.ErrReentered)
	case <-time.After(reenterTimeout):
		t.Fatalf("the reference's Update never returned in %v (the background goroutine waits for the lock it holds)", reenterTimeout)
	}
	done := make(chan error, 1)
	go func() { done <- c.Update() }()
	select {
	case err = <-done:
		assert.NoError(t, err)
	case <-time.After(reenterTimeout):
		t.Fatalf("Update hung after the reference re-entered: the lock was left held")
	}
	assert.NoError(t, c.Close())
}

// TestAWriterWaitsForAnotherGoroutinesRead: a writer call from another
// goroutine while the writer is in a slow Read is not a re-entry: it
// waits for the lock and succeeds.
func TestAWriterWaitsForAnotherGoroutinesRead(t *testing.T) {
	m := mustManual(1e9, 64)
	var slow atomic.Bool
	inRead, release := make(chan struct{}), make(chan struct{})
	src := schedclock.Source{Name: "slow", Bits: 64, Rate: 1e9, Read: func() uint64 {
		if slow.CompareAndSwap(true, false) {
			close(inRead)
			<-release
		}
		return m.Read()
	}}
	c, err := schedclock.New(src)
	require.NoError(t, err)
	defer c.Close()
	for _, call := range []func() error{c.Update, c.Suspend, c.Resume, func() error { return c.Register(src) }, c.Close} {
		// A writer that reads the counter, stopped in the Read: Update,
		// or Resume on a suspended clock.
		slow.Store(true)
		first := make(chan error, 1)
		go func() {
			if c.Info().Suspended {
				first <- c.Resume()
			} else {
				first <- c.Update()
			}
		}()
		<-inRead
		second := make(chan error, 1)
		go func() { second <- call() }()
		if err, returned := awaitWaitingForTheLock(t, second); returned {
			t.Fatalf("a writer on another goroutine did not wait for the Read in progress: %v", err)
		}
		close(release)
		require.NoError(t, <-first)
		require.NoError(t, <-second)
		inRead, release = make(chan struct{}), make(chan struct{})
	}
}

// awaitWaitingForTheLock returns once t's goroutine, or one it started,
// waits for a clock's lock (its stack shows a Mutex's Lock called from the
// package), or once returned yields a result first: a writer that did
// not wait.
func awaitWaitingForTheLock(t *testing.T, returned <-chan error) (error, bool) {
	buf := make([]byte, 1<<20)
	for {
		select {
		case err := <-returned:
			return err, true
		default:
		}
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "Mutex).Lock") && strings.Contains(g, "github.com/schedclock/schedclock.(*Clock)") && strings.Contains(g, "."+t.Name()) {
				return nil, false
			}
		}
		runtime.Gosched()
	}
}

// TestAFormerWriterIsNoHolder: a goroutine that held the writer lock
// before is not taken for its holder afterwards: while Time's first call
// (which takes the lock without naming a holder) is in a slow Read on
// another goroutine, an Update from the goroutine that wrote last waits
// and succeeds instead of failing with ErrReentered.
func TestAFormerWriterIsNoHolder(t *testing.T) {
	m := mustManual(1e9, 64)
	var slow atomic.Bool
	inRead, release := make(chan struct{}), make(chan struct{})
	c, err := schedclock.New(schedclock.Source{Name: "slow", Bits: 64, Rate: 1e9, Read: func() uint64 {
		if slow.CompareAndSwap(true, false) {
			close(inRead)
			<-release
		}
		return m.Read()
	}})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Update()) // this goroutine writes, and lets go
	timed := make(chan time.Time, 1)
	go func() {
		now := c.Now()
		slow.Store(true) // the Now inside Time's first call, under the lock
		timed <- c.WallTime(now)
	}()
	<-inRead
	updated := make(chan error, 1)
	go func() {
		awaitWaitingForTheLock(t, updated) // or an Update that did not wait
		close(release)
	}()
	err = c.Update()
	updated <- err
	assert.NoError(t, err, "Update while another goroutine holds the lock")
	<-timed
}

// TestUnreachableClocksStop: clocks made by New and dropped without
// Close, some with Coarse's ticker running, stop their goroutines once
// the garbage collector finds them unreachable, as Go's own timers are
// collected. The wait is bounded by how long making them took (at least
// 2 s), since the cleanups run on one goroutine at the pace of the
// machine.
func TestUnreachableClocksStop(t *testing.T) {
	const clocks = 1000
	before := runtime.NumGoroutine()
	start := time.Now()
	held := make([]*schedclock.Clock, clocks) // alive until counted
	for i := range held {
		src, err := schedclock.Raw()
		require.NoError(t, err)
		held[i], err = schedclock.New(src)
		require.NoError(t, err)
		held[i].Now()
		if i%10 == 0 {
			held[i].Coarse() // its ticker too
		}
	}
	made := time.Since(start)
	require.GreaterOrEqual(t, runtime.NumGoroutine(), before+clocks, "the clocks' goroutines")
	clear(held) // dropped, none closed
	deadline := time.Now().Add(max(2*time.Second, 4*made))
	for {
		runtime.GC()
		n := runtime.NumGoroutine()
		if n <= before {
			t.Logf("%d clocks made in %v; goroutines back to %d (%d before) %v after", clocks, made, n, before, time.Since(start)-made)
			return
		}
		require.True(t, time.Now().Before(deadline), "%d goroutines, %d before the %d clocks were made and dropped", n, before, clocks)
		time.Sleep(10 * time.Millisecond)
	}
}

// TestNilAndZeroClocksAreTheDefault: a nil *Clock and a zero Clock{}
// are the default clock, as the Clock doc says: their readings advance
// with Default()'s, interleaved with them on one timeline, and every
// reader answers as the default clock's does.
func TestNilAndZeroClocksAreTheDefault(t *testing.T) {
	d := schedclock.Default()
	for name, c := range map[string]*schedclock.Clock{"nil": nil, "zero": {}} {
		t.Run(name, func(t *testing.T) {
			first := c.Now()
			between := d.Now()
			time.Sleep(time.Millisecond)
			later := c.Now()
			assert.Positive(t, first, "Now")
			assert.LessOrEqual(t, first, between, "Now after the default clock's Now")
			assert.Less(t, between, later, "Now a millisecond after the default clock's")
			assert.GreaterOrEqual(t, c.Since(first), time.Millisecond)
			assert.LessOrEqual(t, c.Since(between), d.Since(between))
			coarse := c.Coarse()
			assert.Positive(t, coarse, "Coarse")
			assert.LessOrEqual(t, coarse, d.Now(), "Coarse ahead of the default clock's Now")
			assert.Equal(t, d.WallTime(later), c.WallTime(later), "WallTime")
			assert.False(t, c.Info().Closed)
			assert.Equal(t, d.Info().Source, c.Info().Source)
			kt, ok := c.KernelTime(schedclock.KernelMonotonic, later)
			dkt, dok := d.KernelTime(schedclock.KernelMonotonic, later)
			assert.Equal(t, dok, ok, "KernelTime's ok")
			assert.InDelta(t, dkt, kt, float64(time.Millisecond), "KernelTime")
			if ok {
				back, ok := c.FromKernelTime(schedclock.KernelMonotonic, kt)
				assert.True(t, ok, "FromKernelTime's ok")
				assert.InDelta(t, int64(later), int64(back), float64(time.Millisecond), "FromKernelTime")
			}
			assert.NoError(t, c.Update(), "Update folds the default clock")
			assert.ErrorIs(t, c.Close(), schedclock.ErrDefaultClock, "Close")
			// A Register refused for the default clock's reason: slower than
			// its source (a zero Clock has none to compare with).
			slow := &schedclock.FakeCounter{}
			assert.ErrorIs(t, c.Register(slow.Source("slow", 64, 1000)), schedclock.ErrSlowerSource)
		})
	}
}

// TestTimeAtItsEdges: readings before the clock's start (which no Now of
// it returns) map through its first segment, Time(math.MinInt64) about
// 292 years before the start, as Time's doc says; the largest saturates
// in 2262. Every one keeps the map's order.
func TestTimeAtItsEdges(t *testing.T) {
	c, err := schedclock.New(schedclock.Portable())
	require.NoError(t, err)
	defer c.Close()
	now := c.Now()
	at := c.WallTime(now)
	assert.True(t, c.WallTime(-1).Before(c.WallTime(0)))
	assert.True(t, c.WallTime(0).Before(at) || c.WallTime(0).Equal(at))
	// Time(0) + math.MinInt64, to within the reading the first pairing
	// took (where the subtraction saturates).
	assert.InDelta(t, c.WallTime(0).UnixNano()+math.MinInt64, c.WallTime(math.MinInt64).UnixNano(), float64(c.Now()))
	// The largest reading maps through the last segment's slope: where
	// the wall clock runs faster than the clock it saturates, in 2262;
	// where slower (the slope a pairing under qemu-ppc64le measured was
	// some tens of ppm negative: a week short of 2262-04-11), it falls
	// short by that rate alone.
	maxAt := c.WallTime(math.MaxInt64)
	assert.InEpsilon(t, float64(math.MaxInt64), float64(maxAt.UnixNano()), 1e-3, "%v", maxAt)
	assert.False(t, maxAt.Before(c.WallTime(math.MaxInt64-1)))
	assert.True(t, c.WallTime(math.MinInt64+1).After(c.WallTime(math.MinInt64)) || c.WallTime(math.MinInt64+1).Equal(c.WallTime(math.MinInt64)))
}

// TestAClosedClockSaturates: a closed 1 GHz clock, no longer folded,
// whose counter jumps 300 years in one step (past math.MaxInt64 ns, and
// short of the negative zone at 7/8 of the range) reads
// math.MaxInt64, not 0 nor a wrapped value. (A fake counter, not a
// Manual: a closed clock on a Manual stands still.)
func TestAClosedClockSaturates(t *testing.T) {
	m := &schedclock.FakeCounter{}
	c, err := schedclock.New(m.Source("fake", 64, 1e9))
	require.NoError(t, err)
	require.NoError(t, c.Close())
	const threeHundredYears = 300 * 365.25 * 24 * 3600 * 1e9
	m.Set(uint64(threeHundredYears))
	assert.Equal(t, schedclock.Instant(math.MaxInt64), c.Now())
	assert.Equal(t, time.Duration(math.MaxInt64), c.Since(0))
}

// A duplicate Option is refused.
// New's options (schedclock.go): each may be given once, and a nil or zero
// Option is refused. What each option does is tested beside what it
// configures (calibrate_test.go, coarse_test.go).

func TestDuplicateOptionsAreRefused(t *testing.T) {
	ref := func() int64 { return time.Now().UnixNano() }
	for name, opts := range map[string][]schedclock.Option{
		"WithReference":        {schedclock.WithReference(ref), schedclock.WithReference(ref)},
		"WithCoarseResolution": {schedclock.WithCoarseResolution(time.Millisecond), schedclock.WithCoarseResolution(2 * time.Millisecond)},
	} {
		c, err := schedclock.New(schedclock.Portable(), opts...)
		if !assert.ErrorIs(t, err, schedclock.ErrInvalidOption, name) {
			_ = c.Close()
		}
	}
}

func TestWithReferenceRefusesNil(t *testing.T) {
	f := &schedclock.FakeCounter{}
	_, err := schedclock.New(f.Source("f", 64, 1e9), schedclock.WithReference(nil))
	assert.ErrorIs(t, err, schedclock.ErrInvalidOption)
	_, err = schedclock.New(f.Source("f", 64, 1e9), schedclock.Option{})
	assert.ErrorIs(t, err, schedclock.ErrInvalidOption)
}
