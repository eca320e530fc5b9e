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

	"github.com/schedclock/schedclock/internal/kernel"
	"github.com/schedclock/schedclock/internal/pvclock"
	"github.com/schedclock/schedclock/internal/race"
	"github.com/schedclock/schedclock/internal/testenv"
)

// TestPvclockSharedLayout: clockNow reads pvclockShared's page at +0 and
// its src at +8 (now_amd64.s).
func TestPvclockSharedLayout(t *testing.T) {
	assert.EqualValues(t, 0, unsafe.Offsetof(pvclockShared.page))
	assert.EqualValues(t, 8, unsafe.Offsetof(pvclockShared.src))
}

// TestNowInlinesThePvclockPage: Clock.Now's inlined page read agrees
// with the Go path (genericNow, through readPvclock) on a pvclock page,
// reading for reading, in order.
func TestNowInlinesThePvclockPage(t *testing.T) {
	onSyntheticPvclock(t, syntheticPvclock(), nil, func(c *Clock, _ *pvclock.Page, _ *paravirtSource) {
		prev := c.nanos()
		for range 20000 {
			g := genericNow(c)
			a := c.nanos()
			require.LessOrEqual(t, prev, g)
			require.LessOrEqual(t, g, a)
			prev = a
		}
	})
}

// TestNowConvertsThePageByItsLine: the inline page read converts the
// page's nanoseconds by one add only where the clock's line is a pure
// offset (bank.offset); on any other line (here a Source on the page
// that declares 1.001 GHz) it converts as the line says. Either way it
// agrees with the Go path reading for reading, a second into the line.
func TestNowConvertsThePageByItsLine(t *testing.T) {
	src, _, _ := syntheticParavirt(t, syntheticPvclock(), nil)
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
	src, _, _ := syntheticParavirt(t, syntheticPvclock(), nil)
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

// syntheticParavirt is Paravirt on a synthetic page holding first,
// shared (sharePage) for the rest of t with a Source whose reference is
// raw (nil: the page's own timeline at first, timelineOf).
func syntheticParavirt(t *testing.T, first pvclock.Pvclock, raw func() int64) (Source, *pvclock.Page, *paravirtSource) {
	pg, page := syntheticPage(t, first)
	if raw == nil {
		raw = timelineOf(first)
	}
	s := sharePage(t, page, raw)
	src, err := paravirtOn(page, alreadyShared)
	require.NoError(t, err)
	return src, pg, s
}

// onSyntheticPvclock runs f with a Clock on syntheticParavirt's Source;
// the Clock is closed (its goroutine stopped) before the shared state is
// restored.
func onSyntheticPvclock(t *testing.T, first pvclock.Pvclock, raw func() int64, f func(c *Clock, pg *pvclock.Page, s *paravirtSource)) {
	src, pg, s := syntheticParavirt(t, first, raw)
	c, err := New(src)
	require.NoError(t, err)
	defer c.Close()
	f(c, pg, s)
}

// TestNowLeavesAnUnstablePage: with the stable bit clear, Now must not
// read the page inline but go through readPvclock, which falls back.
func TestNowLeavesAnUnstablePage(t *testing.T) {
	onSyntheticPvclock(t, syntheticPvclock(), nil, func(c *Clock, pg *pvclock.Page, s *paravirtSource) {
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
	onSyntheticPvclock(t, syntheticPvclock(), nil, func(c *Clock, pg *pvclock.Page, s *paravirtSource) {
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

// pageFault is one way a synthetic page goes wrong: bad turns the
// page's good parameters into what the hypervisor (or a test)
// publishes; hold, if not nil, drives the page instead, calling read
// (which reads the clocks and checks the readings) as it goes.
type pageFault struct {
	name       string
	bad        func(p pvclock.Pvclock) pvclock.Pvclock
	hold       func(pg *pvclock.Page, good pvclock.Pvclock, read func())
	consistent bool // still the hypervisor's time: no fault
	either     bool // a fault or not, as the readers meet the writer
}

// pageFaults are the pages a Source on the paravirtual clock must read
// as faults, or as no motion, and never as time: a TSC below the stamp
// (once: a stamp a little ahead of the TSC, by µs, which is still the
// hypervisor's time, or by a millisecond, which is not; held: a stamp
// seconds ahead, with the time of the old stamp or of the new one),
// scales no hypervisor writes, system_time stepped by a second either
// way, a writer republishing while the clock is read 10,000 times, and
// an update held odd over 1,000 reads. pageFaults returns them (a
// function, not a package-level table: the test binary's package
// initialisation stays as it was).
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
		{name: "version churn over 10,000 reads", either: true, hold: func(pg *pvclock.Page, good pvclock.Pvclock, read func()) {
			var stop atomic.Bool
			done := make(chan struct{})
			go func() {
				defer close(done)
				for !stop.Load() {
					pg.Publish(good)
				}
			}()
			for range 10000 {
				read()
			}
			stop.Store(true)
			<-done
		}},
		{name: "an update held odd over 1,000 reads", hold: func(pg *pvclock.Page, good pvclock.Pvclock, read func()) {
			pg.BeginUpdate()
			for range 1000 {
				read()
			}
			pg.Store(good)
			pg.EndUpdate()
		}},
	}
}

// TestNowThroughPageFaults drives a pvclock page through each of
// pageFaults while a Clock on it is read, and then makes it sane again
// (its good parameters): no reading may run more than 1 ms ahead of
// the page's timeline (the Source's reference), step back, or saturate;
// each fault must show in the Source's record of falls back (what Info
// reports of it); and once the page is sane the Source must be back on
// it within a few reads, the clock within 1 ms of the reference.
func TestNowThroughPageFaults(t *testing.T) {
	good := syntheticPvclock()
	ref := timelineOf(good)
	onSyntheticPvclock(t, good, ref, func(c *Clock, pg *pvclock.Page, s *paravirtSource) {
		// The clock's offset from the reference, the tightest of a few
		// brackets.
		offset, width := int64(0), int64(math.MaxInt64)
		for range 32 {
			r0 := ref()
			n := c.nanos()
			if w := ref() - r0; w < width {
				offset, width = n-r0, w
			}
		}
		prev := c.nanos()
		check := func(when string) {
			r0 := ref()
			n := c.nanos()
			r1 := ref()
			// Plain comparisons: testify's cost per call would be most of
			// the loop's.
			switch {
			case n == math.MaxInt64:
				t.Fatalf("%s: Now saturated", when)
			case n < prev:
				t.Fatalf("%s: Now stepped back by %v", when, time.Duration(prev-n))
			case n-(r1+offset) > int64(time.Millisecond):
				t.Fatalf("%s: Now %v ahead of the page's timeline", when, time.Duration(n-(r1+offset)))
			case n-(r0+offset) < -int64(time.Millisecond):
				t.Fatalf("%s: Now %v behind the page's timeline", when, time.Duration(r0+offset-n))
			}
			prev = n
		}
		falls := func() int {
			if e := s.events.Load(); e != nil {
				return e.falls
			}
			return 0
		}
		for _, f := range pageFaults() {
			check(f.name + ", before")
			fallsBefore := falls()
			if f.hold != nil {
				f.hold(pg, good, func() { check(f.name) })
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
				_, history := s.status()
				assert.Contains(t, history, fmt.Sprintf("%d falls back to %s", falls(), rawClockName), "%s: the record Info shows", f.name)
			}
			pg.Publish(good)
			back := false
			for i := 0; i < 1000 && !back; i++ {
				check(f.name + ", sane again")
				back = s.onPage()
			}
			assert.True(t, back, "%s: not back on the page after 1000 reads of a sane page", f.name)
			n, r := c.nanos(), ref()
			assert.InDelta(t, float64(r+offset), float64(n), float64(time.Millisecond), "%s: the clock %v from the page's timeline, sane again", f.name, time.Duration(n-r-offset))
		}
		_, history := s.status()
		t.Logf("the Source's record: %s", history)
	})
}

// syntheticCounter is pvclockCounter on a synthetic page: the default
// clock's table entry for it, with the kernel's word (its clocksource is
// kvm-clock) given rather than read.
func syntheticCounter(page *paravirtPage) *descriptor {
	return &descriptor{
		Arch: "amd64",
		Probe: func() (Source, rateOrigin, float64, error) {
			src, err := paravirtOn(page, alreadyShared)
			return src, rateNanoseconds, 0, err
		},
		Verdict: func() kernel.Verdict {
			return kernel.Verdict{Want: page.kind.clocksource, Current: page.kind.clocksource}
		},
		Evidence: page.evidence,
		Describe: page.description,
		Status:   pvclockStatus,
	}
}

// TestDefaultClockInfoNamesAPageFallBack: a default clock on the shared
// pvclock Source says in Info when the Source left the page for a
// transient (Source, and CounterCheck with the fall back's reason and
// time), and says it is back once the page is consistent again.
// lockedInfo is c's Info as of now: taken under the writer's lock,
// where Info answers with the last writer's snapshot while the
// background loop (which the first use starts) holds it.
func lockedInfo(c *Clock) Info {
	c.st.mu.Lock()
	defer c.unlock()
	return c.infoLocked()
}

func TestDefaultClockInfoNamesAPageFallBack(t *testing.T) {
	base := syntheticPvclock()
	pg, page := syntheticPage(t, base)
	s := sharePage(t, page, timelineOf(base))
	// The Source's own fall back, not the clock's: no set-up runs (as if
	// it had), so no background loop follows the page's evidence off it
	// (TestTheCountersOwnEvidenceIsFollowedForLife tests that), and no
	// cross-CPU check reads the page after the test. With no background
	// goroutine there is nothing to Close (Close waits for it).
	c := newDefaultClock([]*descriptor{syntheticCounter(page)})
	c.st.policy.first.used.Store(true)
	c.chooseHardware()
	in := lockedInfo(c)
	require.Equal(t, "kvm-clock (pvclock, stable)", in.Source, "%+v", in)
	assert.Contains(t, in.Evidence.CounterCheck, "pvclock page at ")
	pg.BeginUpdate()
	before := c.nanos()
	for range 3 {
		c.nanos()
	}
	in = lockedInfo(c)
	assert.Contains(t, in.Source, "kvm-clock (pvclock, stable) (on "+rawClockName+" since ")
	assert.Contains(t, in.Evidence.CounterCheck, "1 falls back to "+rawClockName+", the last at ")
	assert.Contains(t, in.Evidence.CounterCheck, "version kept changing")
	pg.Store(base)
	pg.EndUpdate()
	for i := 0; i < 100_000 && !s.onPage(); i++ {
		require.GreaterOrEqual(t, c.nanos(), before)
	}
	in = lockedInfo(c)
	assert.Equal(t, "kvm-clock (pvclock, stable)", in.Source)
	assert.Contains(t, in.Evidence.CounterCheck, "1 returns to the page, the last at ")
}

// TestPageSwitchesNeverStepBackAcrossReaders: readers on every P but
// the writer's read Now (the inline page read and readPvclock) on a
// pvclock page while a writer sends the Source back and forth between
// page and fallback (odd holds, a cleared stable bit, a page 40 µs
// behind and one stamped ahead, each followed by the sane page), with a
// reference 30 µs ahead of the page's timeline and then 30 µs behind
// it, so that switches one way or the other would step back by tens of
// µs without the Source's floor. Each reading must be at least the
// largest any reader published before it began. The writer waits for
// the readers' progress (a number of readings), not for time, between
// its steps: each step is straddled by readings whatever the load.
func TestPageSwitchesNeverStepBackAcrossReaders(t *testing.T) {
	var ahead atomic.Int64
	good := syntheticPvclock()
	timeline := timelineOf(good)
	onSyntheticPvclock(t, good, func() int64 { return timeline() + ahead.Load() }, func(c *Clock, pg *pvclock.Page, s *paravirtSource) {
		ahead.Store(int64(30 * time.Microsecond))
		var maxSeen atomic.Int64
		var stop atomic.Bool
		var reads atomic.Int64
		var wg sync.WaitGroup
		for range max(1, runtime.GOMAXPROCS(0)-1) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; !stop.Load(); i++ {
					before := maxSeen.Load()
					v := c.nanos()
					if v < before {
						t.Errorf("a reading %v below one published before it began", time.Duration(before-v))
						return
					}
					for m := maxSeen.Load(); v > m && !maxSeen.CompareAndSwap(m, v); m = maxSeen.Load() {
					}
					reads.Add(1)
					if i%64 == 63 {
						runtime.Gosched() // the writer's turn, where it shares a P
					}
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
		// readersRead waits until the readers made n more readings.
		readersRead := func(n int64) {
			for target := reads.Load() + n; reads.Load() < target && !t.Failed(); {
				runtime.Gosched()
			}
		}
		for i := range rounds {
			writerRead("on the page")
			switch i % 4 {
			case 0:
				pg.BeginUpdate()
				writerRead("an update held odd")
				readersRead(100)
				pg.Store(good)
				pg.EndUpdate()
			case 1:
				bad := good
				bad.Flags = 0
				pg.Publish(bad)
			case 2:
				bad := good
				bad.SystemTime -= 40_000
				pg.Publish(bad)
			case 3:
				bad := good
				stamp := pvclock.TSC() + 1<<20
				bad.SystemTime, bad.TSCTimestamp = bad.Cycles(stamp), stamp
				pg.Publish(bad)
			}
			writerRead(fmt.Sprintf("case %d", i%4))
			readersRead(100)
			pg.Publish(good)
			for range 100 {
				writerRead("sane again")
			}
			readersRead(200)
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
	onSyntheticPvclock(t, base, ref, func(c *Clock, pg *pvclock.Page, s *paravirtSource) {
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
	onSyntheticPvclock(t, base, ref, func(c *Clock, pg *pvclock.Page, s *paravirtSource) {
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

// TestNowRechecksThePageVersion: a reader on one CPU reads Now (the
// inline page read) while a writer on another republishes the page
// between two parameter sets of one timeline, 2^32 counts apart in
// their stamps: each is the page's time, but a reading that mixed one
// set's stamp with the other's system_time would be seconds off it. The writer republishes as soon as the reader has read the new
// version a few times, so updates land in the middle of inline reads
// thousands of times; only the version re-check after the loads keeps
// the readings on the timeline. It needs two CPUs, on which the reader
// and the writer run at the same time.
func TestNowRechecksThePageVersion(t *testing.T) {
	testenv.RequireCPUs(t, 2)
	a := syntheticPvclock()
	b := a // stamped 2^32 counts before a, at a's timeline there
	b.TSCTimestamp -= 1 << 32
	b.SystemTime -= pvclock.ScaleDelta(1<<32, a.Mul, a.Shift)
	ref := timelineOf(a)
	onSyntheticPvclock(t, a, ref, func(c *Clock, pg *pvclock.Page, s *paravirtSource) {
		lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
		for range 32 { // the clock's offset from the timeline, bracketed
			r0 := ref()
			n := c.nanos()
			r1 := ref()
			lo, hi = min(lo, n-r1), max(hi, n-r0)
		}
		var stop atomic.Bool
		var reads atomic.Int64
		var bad atomic.Int64
		var worst atomic.Int64
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; !stop.Load(); i++ {
				r0 := ref()
				n := c.nanos()
				r1 := ref()
				if off := n - r1 - hi; off > int64(time.Millisecond) {
					bad.Add(1)
					worst.Store(max(worst.Load(), off))
				} else if off := lo - (n - r0); off > int64(time.Millisecond) {
					bad.Add(1)
					worst.Store(max(worst.Load(), off))
				}
				reads.Add(1)
				if i%64 == 63 {
					runtime.Gosched() // the writer's turn, where it shares a P
				}
			}
		}()
		// 2000 flips in the fast layer, 20,000 in the qualification
		// layer's (and the mutants') longer run.
		flips := 2000
		if testenv.Qualifying() && !race.Enabled {
			flips = 20000
		}
		for i := range flips {
			pg.Publish([]pvclock.Pvclock{b, a}[i%2])
			// The reader accepts the new version (off the inline path)
			// and then reads it inline: republish while it does.
			version := uint64(pg.Load().Version)
			for s.state.Load() != version && !stop.Load() {
				runtime.Gosched()
			}
			for target := reads.Load() + 4; reads.Load() < target; {
			}
		}
		stop.Store(true)
		<-done
		assert.Zero(t, bad.Load(), "readings off the page's timeline (worst %v): a reading mixed two updates", time.Duration(worst.Load()))
		t.Logf("%d updates under %d readings", flips, reads.Load())
	})
}
