//go:build gc && !purego

package schedclock

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/hwcounter"
	"github.com/schedclock/schedclock/internal/pvclock"
	"github.com/schedclock/schedclock/internal/race"
)

// TestPvclockSharedLayout: clockNow reads pvclockShared's page at +0 and
// its src at +8 (now_amd64.s).
func TestPvclockSharedLayout(t *testing.T) {
	assert.EqualValues(t, 0, unsafe.Offsetof(pvclockShared.page))
	assert.EqualValues(t, 8, unsafe.Offsetof(pvclockShared.src))
}

// TestNowInlinesThePvclockPage: Clock.Now's inlined page read agrees
// with the Go path (genericNow, through readPvclock) on the real page,
// reading for reading, in order.
func TestNowInlinesThePvclockPage(t *testing.T) {
	src, err := Paravirt()
	if err != nil || pvclockShared.page == nil {
		t.Skipf("no pvclock page here: %v", err)
	}
	c, err := New(src)
	require.NoError(t, err)
	defer c.Close()
	prev := c.nanos()
	for range 20000 {
		g := genericNow(c)
		a := c.nanos()
		require.LessOrEqual(t, prev, g)
		require.LessOrEqual(t, g, a)
		prev = a
	}
}

// TestNowConvertsThePageByItsLine: the inline page read converts the
// page's nanoseconds by one add only where the clock's line is a pure
// offset (bank.offset); on any other line (here a Source on the page
// that declares 1.001 GHz) it converts as the line says. Either way it
// agrees with the Go path reading for reading, a second into the line.
func TestNowConvertsThePageByItsLine(t *testing.T) {
	src, err := Paravirt()
	if err != nil || pvclockShared.page == nil {
		t.Skipf("no pvclock page here: %v", err)
	}
	for _, rate := range []uint64{1_000_000_000, 1_001_000_000} {
		src.Rate = rate
		c, err := New(src)
		require.NoError(t, err)
		c.st.mu.Lock()
		ln := c.st.cur
		ln.epochCyc = readPvclock() - 1_000_000_000
		c.publishLocked(ln)
		c.unlock()
		bank := &c.latch.banks[c.latch.seq.Load()&1]
		if rate == 1_000_000_000 {
			assert.NotZero(t, bank.offset.Load(), "a line of nanoseconds is not a pure offset")
		} else {
			assert.Zero(t, bank.offset.Load(), "a %d Hz line taken for a pure offset", rate)
		}
		prev := c.nanos()
		for range 2000 {
			g := genericNow(c)
			a := c.nanos()
			require.LessOrEqual(t, prev, g, "%d Hz", rate)
			require.LessOrEqual(t, g, a, "%d Hz", rate)
			prev = a
		}
		require.NoError(t, c.Close())
	}
}

// TestNowOnAPageLineOutsideItsWindow: where the page's reading is below
// the line's epoch (clamped to it) or so far past it that the 64-bit
// product overflows (the 128-bit path), the inline page read converts
// as the Go path does, not by the pure offset.
func TestNowOnAPageLineOutsideItsWindow(t *testing.T) {
	src, err := Paravirt()
	if err != nil || pvclockShared.page == nil {
		t.Skipf("no pvclock page here: %v", err)
	}
	c, err := New(src)
	require.NoError(t, err)
	defer c.Close()
	c.st.mu.Lock()
	ln := c.st.cur
	ln.epochCyc = readPvclock() + uint64(1000*time.Second)
	ln.epochNs = 1234
	c.publishLocked(ln)
	c.unlock()
	require.NotZero(t, c.latch.banks[c.latch.seq.Load()&1].offset.Load())
	assert.Equal(t, int64(1234), c.nanos())
	assert.Equal(t, int64(1234), genericNow(c))

	c.st.mu.Lock()
	ln.epochCyc = readPvclock() - ln.conv.overflowFrom()*3
	c.publishLocked(ln)
	c.unlock()
	before, _ := ln.at(readPvclock())
	got, gotGeneric := c.nanos(), genericNow(c)
	after, _ := ln.at(readPvclock())
	assert.GreaterOrEqual(t, got, before)
	assert.GreaterOrEqual(t, gotGeneric, got)
	assert.GreaterOrEqual(t, after, gotGeneric)
	assert.Greater(t, before, int64(ln.conv.nanos(ln.conv.overflowFrom())), "the 128-bit path must be taken")
}

// onSyntheticPvclock points the shared pvclock state at a copy of the
// real page for the length of f, with a Clock on it; the Clock is
// closed (its goroutine stopped) before the state is restored.
func onSyntheticPvclock(t *testing.T, f func(c *Clock, pg *pvclock.Page, s *paravirtSource)) {
	onSyntheticPvclockWith(t, nil, rawNow, f)
}

// onSyntheticPvclockWith is onSyntheticPvclock with the page's first
// parameters (nil: the real page's) and the Source's reference raw.
func onSyntheticPvclockWith(t *testing.T, first *pvclock.Pvclock, raw func() int64, f func(c *Clock, pg *pvclock.Page, s *paravirtSource)) {
	src, err := Paravirt()
	if err != nil || pvclockShared.page == nil {
		t.Skipf("no pvclock page here: %v", err)
	}
	pg, page := syntheticCopy(t)
	if first != nil {
		pg.Publish(*first)
	}
	s, err := newParavirtSource(page, raw)
	require.NoError(t, err)
	// The default clock's Info reads the shared state under its lock
	// (pvclockStatus), from its background goroutine too: swap it there.
	defaultClock.st.mu.Lock()
	saved := pvclockShared
	pvclockShared.page, pvclockShared.src = pg, s
	defaultClock.st.mu.Unlock()
	defer func() {
		defaultClock.st.mu.Lock()
		pvclockShared = saved
		defaultClock.st.mu.Unlock()
	}()
	c, err := New(src)
	require.NoError(t, err)
	defer c.Close()
	f(c, pg, s)
}

// TestNowLeavesAnUnstablePage: with the stable bit clear, Now must not
// read the page inline but go through readPvclock, which falls back.
func TestNowLeavesAnUnstablePage(t *testing.T) {
	onSyntheticPvclock(t, func(c *Clock, pg *pvclock.Page, s *paravirtSource) {
		before := c.nanos()
		p := pg.Load()
		p.Flags &^= pvclock.TSCStableBit
		pg.Publish(p)
		after := c.nanos()
		assert.True(t, !s.onPage(), "Now read a page without PVCLOCK_TSC_STABLE_BIT inline")
		assert.GreaterOrEqual(t, after, before)
	})
}

// TestNowLeavesAPageUnderUpdate: with an update held half-written (odd
// version, the new tsc_timestamp beside the old time), Now must not
// accept the torn page: the inline read hands over, the bounded Go read
// gives up and falls back, and the reading stays on the page's timeline.
func TestNowLeavesAPageUnderUpdate(t *testing.T) {
	onSyntheticPvclock(t, func(c *Clock, pg *pvclock.Page, s *paravirtSource) {
		before := c.nanos()
		p := pg.Load()
		pg.BeginUpdate()
		// Torn: a stamp 2^31 counts (about a second here) before the
		// time beside it, a reading that still passes the conversion's
		// range check.
		p.TSCTimestamp -= 1 << 31
		pg.Store(p)
		after := c.nanos()
		assert.True(t, !s.onPage(), "Now accepted a page with an odd version")
		assert.GreaterOrEqual(t, after, before)
		assert.Less(t, after-before, int64(100e6), "a reading far from the page's time")
	})
}

// pageFault is one way a synthetic page goes wrong: bad turns a copy of
// the real page's parameters into what the hypervisor (or a test)
// publishes; hold, if not nil, drives the page for a while instead.
type pageFault struct {
	name       string
	bad        func(p pvclock.Pvclock) pvclock.Pvclock
	hold       func(pg *pvclock.Page, good pvclock.Pvclock)
	consistent bool // still the hypervisor's time: no fault
	either     bool // a fault or not, as the readers meet the writer
}

// pageFaults are the pages a Source on the paravirtual clock must read
// as faults, or as no motion, and never as time: a TSC below the stamp
// (once: a stamp a little ahead of the TSC, by µs, which is still the
// hypervisor's time, or by a millisecond, which is not; held:
// a stamp seconds ahead, with the time of the old stamp or of the new
// one), scales no
// hypervisor writes, system_time stepped by a second either way, a
// writer republishing for 20 ms, and an update held odd for 10 ms.
// pageFaults returns them (a function, not a package-level table: the
// test binary's package initialisation stays as it was).
func pageFaults() []pageFault {
	return []pageFault{
		{name: "a stamp 1M counts ahead of the TSC", bad: func(p pvclock.Pvclock) pvclock.Pvclock {
			stamp := pvclock.TSC() + 1_000_000
			p.SystemTime, p.TSCTimestamp = p.Cycles(stamp), stamp
			return p
		}},
		{name: "a stamp 20k counts ahead of the TSC (µs: a consistent page)", consistent: true, bad: func(p pvclock.Pvclock) pvclock.Pvclock {
			stamp := pvclock.TSC() + 20_000
			p.SystemTime, p.TSCTimestamp = p.Cycles(stamp), stamp
			return p
		}},
		{name: "a stamp 2^33 counts ahead, the old time", bad: func(p pvclock.Pvclock) pvclock.Pvclock {
			p.TSCTimestamp = pvclock.TSC() + 1<<33
			return p
		}},
		{name: "a stamp 2^33 counts ahead, its own time", bad: func(p pvclock.Pvclock) pvclock.Pvclock {
			stamp := pvclock.TSC() + 1<<33
			p.SystemTime, p.TSCTimestamp = p.Cycles(stamp), stamp
			return p
		}},
		{name: "tsc_shift 40", bad: func(p pvclock.Pvclock) pvclock.Pvclock { p.Shift = 40; return p }},
		{name: "tsc_shift 127", bad: func(p pvclock.Pvclock) pvclock.Pvclock { p.Shift = 127; return p }},
		{name: "mul 0", bad: func(p pvclock.Pvclock) pvclock.Pvclock { p.Mul = 0; return p }},
		{name: "system_time +1s", bad: func(p pvclock.Pvclock) pvclock.Pvclock { p.SystemTime += 1e9; return p }},
		{name: "system_time -1s", bad: func(p pvclock.Pvclock) pvclock.Pvclock { p.SystemTime -= 1e9; return p }},
		{name: "version churn for 20ms", either: true, hold: func(pg *pvclock.Page, good pvclock.Pvclock) {
			for end := time.Now().Add(20 * time.Millisecond); time.Now().Before(end); {
				pg.Publish(good)
			}
		}},
		{name: "an update held odd for 10ms", hold: func(pg *pvclock.Page, good pvclock.Pvclock) {
			pg.BeginUpdate()
			time.Sleep(10 * time.Millisecond)
			pg.Store(good)
			pg.EndUpdate()
		}},
	}
}

// TestNowThroughPageFaults drives a copy of the real page through each
// of pageFaults while a Clock on it is read, and then makes it sane
// again (the real page's parameters): no reading may run more than 1 ms
// ahead of CLOCK_MONOTONIC_RAW on the page's timeline, step back, or
// saturate, and once the page is sane the Source must be back on it
// within a few reads, the clock within 1 ms of the reference.
func TestNowThroughPageFaults(t *testing.T) {
	onSyntheticPvclock(t, func(c *Clock, pg *pvclock.Page, s *paravirtSource) {
		// The clock made by New, and a default clock (its watch against
		// CLOCK_MONOTONIC_RAW, its Info) on the same shared Source.
		d := newChosenDefaultClock([]*hwcounter.Counter{&pvclockCounter})
		defer func() { require.NoError(t, d.Close()) }()
		require.Equal(t, "kvm-clock (pvclock, stable)", d.Info().Source)
		clocks := map[string]*Clock{"New(Paravirt())": c, "the default clock": d}
		offsets, prevs := map[string]int64{}, map[string]int64{}
		for name, k := range clocks {
			// The clock's offset from raw, the tightest of a few brackets.
			width := int64(math.MaxInt64)
			for range 32 {
				r0 := rawNow()
				n := k.nanos()
				if w := rawNow() - r0; w < width {
					offsets[name], width = n-r0, w
				}
			}
			prevs[name] = k.nanos()
		}
		check := func(when string) {
			for name, k := range clocks {
				r0 := rawNow()
				n := k.nanos()
				r1 := rawNow()
				offset, prev := offsets[name], prevs[name]
				require.NotEqual(t, int64(math.MaxInt64), n, "%s, %s: Now saturated", name, when)
				require.GreaterOrEqual(t, n, prev, "%s, %s: Now stepped back by %v", name, when, time.Duration(prev-n))
				require.LessOrEqual(t, n-(r1+offset), int64(time.Millisecond), "%s, %s: Now %v ahead of CLOCK_MONOTONIC_RAW", name, when, time.Duration(n-(r1+offset)))
				require.GreaterOrEqual(t, n-(r0+offset), -int64(time.Millisecond), "%s, %s: Now %v behind CLOCK_MONOTONIC_RAW", name, when, time.Duration(r0+offset-n))
				prevs[name] = n
			}
		}
		falls := func() int {
			if e := s.events.Load(); e != nil {
				return e.falls
			}
			return 0
		}
		for _, f := range pageFaults() {
			real, err := foundParavirt()
			require.NoError(t, err)
			good := real.pv.Load()
			check(f.name + ", before")
			fallsBefore := falls()
			if f.hold != nil {
				done := make(chan struct{})
				go func() { defer close(done); f.hold(pg, good) }()
				for running := true; running; {
					select {
					case <-done:
						running = false
					default:
						check(f.name)
					}
				}
			} else {
				pg.Publish(f.bad(good))
				for range 10000 {
					check(f.name)
				}
			}
			switch {
			case f.either:
			case f.consistent:
				assert.Equal(t, fallsBefore, falls(), "%s: a consistent page left", f.name)
			default:
				assert.Greater(t, falls(), fallsBefore, "%s: the Source never left the page", f.name)
				in := d.Info()
				assert.Contains(t, in.Evidence.CounterCheck, fmt.Sprintf("%d falls back to %s", falls(), rawClockName), "%s: Info: %+v", f.name, in)
			}
			pg.Publish(good)
			back := false
			for i := 0; i < 1000 && !back; i++ {
				check(f.name + ", sane again")
				back = s.onPage()
			}
			assert.True(t, back, "%s: not back on the page after 1000 reads of a sane page", f.name)
			assert.Equal(t, "kvm-clock (pvclock, stable)", d.Info().Source, "%s, sane again", f.name)
			for name, k := range clocks {
				n, r := k.nanos(), rawNow()
				assert.InDelta(t, float64(r+offsets[name]), float64(n), float64(time.Millisecond), "%s, %s: the clock %v from CLOCK_MONOTONIC_RAW, sane again", name, f.name, time.Duration(n-r-offsets[name]))
			}
		}
		t.Logf("Info.Evidence.CounterCheck: %s", d.Info().Evidence.CounterCheck)
	})
}

// TestDefaultClockInfoNamesAPageFallBack: the default clock on the
// shared pvclock Source (pointed at a copy of the real page) says in
// Info when the Source left the page for a transient (Source, and
// CounterCheck with the fall back's reason and time), and says it is
// back once the page is consistent again.
func TestDefaultClockInfoNamesAPageFallBack(t *testing.T) {
	onSyntheticPvclock(t, func(_ *Clock, pg *pvclock.Page, s *paravirtSource) {
		c := newChosenDefaultClock([]*hwcounter.Counter{&pvclockCounter})
		defer func() { require.NoError(t, c.Close()) }()
		in := c.Info()
		require.Equal(t, "kvm-clock (pvclock, stable)", in.Source, "%+v", in)
		good := pg.Load()
		pg.BeginUpdate()
		before := c.nanos()
		for range 3 {
			c.nanos()
		}
		in = c.Info()
		assert.Contains(t, in.Source, "kvm-clock (pvclock, stable) (on "+rawClockName+" since ")
		assert.Contains(t, in.Evidence.CounterCheck, "1 falls back to "+rawClockName+", the last at ")
		assert.Contains(t, in.Evidence.CounterCheck, "version kept changing")
		pg.Store(good)
		pg.EndUpdate()
		deadline := time.Now().Add(time.Second)
		for !s.onPage() && time.Now().Before(deadline) {
			require.GreaterOrEqual(t, c.nanos(), before)
		}
		in = c.Info()
		assert.Equal(t, "kvm-clock (pvclock, stable)", in.Source)
		assert.Contains(t, in.Evidence.CounterCheck, "1 returns to the page, the last at ")
	})
}

// TestPageSwitchesNeverStepBackAcrossReaders: readers on every P read
// Now (the inline page read and readPvclock) on a copy of the real page
// while a writer sends the Source back and forth between page and
// fallback (odd holds, a cleared stable bit, a page 40 µs behind and one
// stamped ahead, each followed by the sane page), with a reference
// 30 µs ahead of the page's timeline and then 30 µs behind it, so that
// switches one way or the other would step back by tens of µs without
// the Source's floor. Each reading must be at
// least the largest any reader published before it began.
func TestPageSwitchesNeverStepBackAcrossReaders(t *testing.T) {
	var ahead atomic.Int64
	onSyntheticPvclockWith(t, nil, func() int64 { return rawNow() + ahead.Load() }, func(c *Clock, pg *pvclock.Page, s *paravirtSource) {
		ahead.Store(int64(30 * time.Microsecond))
		var maxSeen atomic.Int64
		var stop atomic.Bool
		var reads atomic.Int64
		var wg sync.WaitGroup
		for range max(2, runtime.GOMAXPROCS(0)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					before := maxSeen.Load()
					v := c.nanos()
					if v < before {
						t.Errorf("a reading %v below one published before it began", time.Duration(before-v))
						return
					}
					for m := maxSeen.Load(); v > m && !maxSeen.CompareAndSwap(m, v); m = maxSeen.Load() {
					}
					reads.Add(1)
				}
			}()
		}
		// Each round gives the readers one page update to straddle: a
		// reader must be between its version load and its re-check when
		// it lands. 240 rounds, so that a reader missing the re-check is
		// caught in every run (60 missed it once in nine loaded CI runs).
		rounds := 240
		if race.Enabled {
			rounds = 40
		}
		// The writer reads too, right before and after each step: a step
		// back across a switch shows there whatever the scheduler does to
		// the readers.
		writerRead := func(when string) {
			before := maxSeen.Load()
			v := c.nanos()
			if v < before {
				t.Errorf("%s: a reading %v below one published before it began", when, time.Duration(before-v))
			}
			for m := maxSeen.Load(); v > m && !maxSeen.CompareAndSwap(m, v); m = maxSeen.Load() {
			}
		}
		for i := range rounds {
			good, err := foundParavirt()
			require.NoError(t, err)
			p := good.pv.Load()
			writerRead("on the page")
			switch i % 4 {
			case 0:
				pg.BeginUpdate()
				writerRead("an update held odd")
				time.Sleep(100 * time.Microsecond)
				pg.Store(p)
				pg.EndUpdate()
			case 1:
				bad := p
				bad.Flags = 0
				pg.Publish(bad)
			case 2:
				bad := p
				bad.SystemTime -= 40_000
				pg.Publish(bad)
			case 3:
				bad := p
				stamp := pvclock.TSC() + 1<<20
				bad.SystemTime, bad.TSCTimestamp = bad.Cycles(stamp), stamp
				pg.Publish(bad)
			}
			writerRead(fmt.Sprintf("case %d", i%4))
			time.Sleep(100 * time.Microsecond)
			pg.Publish(p)
			for range 100 {
				writerRead("sane again")
			}
			time.Sleep(200 * time.Microsecond)
			// The reference 30 µs ahead of the page's timeline, then
			// behind it: the fallback runs ahead of the page, then behind.
			if i%8 == 3 {
				ahead.Store(-ahead.Load())
			}
		}
		stop.Store(true)
		wg.Wait()
		_, history := s.status()
		assert.NotEmpty(t, history, "the Source never left the page")
		t.Logf("%d reads; %s", reads.Load(), history)
	})
}

// TestNowHoldsStillBelowAnAcceptedStamp: a page stamped a few µs ahead
// of the TSC with its own time is consistent (the hypervisor's time, a
// vCPU a little behind the one it wrote for), and the reads below its
// stamp are no motion. On a page whose rate is a hair above 0.5 ns per
// count (mul 2^31+1, shift 0: a 2 GHz TSC), a delta wrapped below the
// stamp, masked to 63 bits, lands 4.3 s ahead: inside the conversion's
// fast range, where only Now's own below-stamp rule stops it. The
// Source's reference is the page's own timeline.
func TestNowHoldsStillBelowAnAcceptedStamp(t *testing.T) {
	base := pvclock.Pvclock{TSCTimestamp: pvclock.TSC(), SystemTime: 1 << 40, Mul: 1<<31 + 1, Flags: pvclock.TSCStableBit}
	ref := func() int64 { return int64(base.Time(pvclock.TSC())) }
	onSyntheticPvclockWith(t, &base, ref, func(c *Clock, pg *pvclock.Page, s *paravirtSource) {
		prev := c.nanos()
		offset := prev - ref()
		below := 0
		for range 50 {
			stamp := pvclock.TSC() + 20_000 // 10 µs of the page's time
			p := base
			p.SystemTime, p.TSCTimestamp = base.Cycles(stamp), stamp
			pg.Publish(p)
			for pvclock.TSC() < stamp+20_000 {
				if pvclock.TSC() < stamp {
					below++
				}
				n := c.nanos()
				require.GreaterOrEqual(t, n, prev, "a step back of %v", time.Duration(prev-n))
				require.LessOrEqual(t, n-(ref()+offset), int64(time.Millisecond), "a reading %v ahead of the page's timeline", time.Duration(n-ref()-offset))
				prev = n
			}
		}
		assert.True(t, s.onPage(), "a page stamped 10 µs ahead with its own time was refused")
		assert.NotZero(t, below, "no read below the stamp")
	})
}

// TestNowHoldsStillBelowAStampWithoutBit63: the same on a page whose
// scale (mul 1, shift 31: a 2 GHz TSC) turns a delta wrapped below the
// stamp into 2^32 ns ahead with bit 63 clear: inside the fast range of
// the clock's line (pure offset, 2^33 ns), where neither the sign test
// nor fastMax stops it, only Now's below-stamp rule.
func TestNowHoldsStillBelowAStampWithoutBit63(t *testing.T) {
	base := pvclock.Pvclock{TSCTimestamp: pvclock.TSC(), SystemTime: 1 << 40, Mul: 1, Shift: 31, Flags: pvclock.TSCStableBit}
	ref := func() int64 { return int64(base.Time(pvclock.TSC())) }
	onSyntheticPvclockWith(t, &base, ref, func(c *Clock, pg *pvclock.Page, s *paravirtSource) {
		require.NotZero(t, c.latch.banks[c.latch.seq.Load()&1].offset.Load(), "the line is not a pure offset")
		require.Greater(t, c.latch.banks[c.latch.seq.Load()&1].fastMax.Load(), uint64(1)<<32, "the line's fast range does not reach the wrapped delta")
		prev := c.nanos()
		offset := prev - ref()
		below := 0
		for range 50 {
			stamp := pvclock.TSC() + 20_000
			p := base
			p.SystemTime, p.TSCTimestamp = base.Cycles(stamp), stamp
			pg.Publish(p)
			for pvclock.TSC() < stamp+20_000 {
				if pvclock.TSC() < stamp {
					below++
				}
				n := c.nanos()
				require.GreaterOrEqual(t, n, prev, "a step back of %v", time.Duration(prev-n))
				require.LessOrEqual(t, n-(ref()+offset), int64(time.Millisecond), "a reading %v ahead of the page's timeline", time.Duration(n-ref()-offset))
				prev = n
			}
		}
		assert.True(t, s.onPage(), "a page stamped ahead with its own time was refused")
		assert.NotZero(t, below, "no read below the stamp")
	})
}
