package schedclock

import (
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The calibration and the watch (calibrate.go) seen from inside: the
// tracker a clock is built with, and the default clock's path where the
// hardware counter's rate must be measured. calibrate_test.go has those
// that the public API can reach, calibrate_internal_qualify_test.go
// those that need real time.

// defaultLike returns a clock set up as the default clock is where the
// hardware counter's rate must be measured: on the portable source,
// tracking hw against the raw clock, ending with a caller's Register.
func defaultLike(t *testing.T, hw Source) *Clock {
	t.Helper()
	c, err := newClock(Portable(), rating{hz: 1e9, origin: rateDeclared},
		&tracker{ref: rawNow, src: hw, endsOnRegister: true})
	require.NoError(t, err)
	c.st.mu.Lock()
	c.st.policy = &trustPolicy{hw: hw, report: trustReport{pending: measurePending(hw.Name)}}
	c.unlock()
	c.start()
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// realtime1GHz is a 1 GHz counter that runs with Go's monotonic clock
// (whose rate is not declared: it must be measured).
func realtime1GHz() Source {
	base := time.Now()
	return Source{Name: "hw", Bits: 64, Read: func() uint64 { return uint64(time.Since(base)) }}
}

// TestCalibrationStopsWithClose checks that Close ends the background
// goroutine, calibration and watch included, at once.
func TestCalibrationStopsWithClose(t *testing.T) {
	// In a testing/synctest bubble: once every other goroutine of the
	// bubble has ended or waits for good (synctest.Wait), the clocks'
	// must have ended.
	synctest.Test(t, func(t *testing.T) {
		base := bubbleGoroutines("")
		for _, hw := range []Source{realtime1GHz(), Portable()} {
			c, err := New(hw, WithReference(rawNow))
			if hw.Rate == 0 {
				c, err = newClock(Portable(), rating{hz: 1e9}, &tracker{ref: rawNow, src: hw, endsOnRegister: true})
				c.start()
			}
			require.NoError(t, err)
			bubbleSleep(5 * time.Millisecond)
			done := make(chan struct{})
			go func() { _ = c.Close(); close(done) }()
			select {
			case <-done:
			case <-time.After(time.Second):
				t.Fatal("Close still waiting for the background goroutine after 1 s")
			}
		}
		synctest.Wait()
		assert.Equal(t, base, bubbleGoroutines(""), "the bubble's goroutines after the Closes")
	})
}

// TestCalibrationAdoptsTheMeasuredCounter checks the default clock's path
// where no register gives the rate: on the portable source at first, on
// the measured counter after firstMeasurement, Rejected cleared.
func TestCalibrationAdoptsTheMeasuredCounter(t *testing.T) {
	c := defaultLike(t, realtime1GHz())
	before := c.Info()
	assert.Equal(t, "portable", before.Source)
	assert.Empty(t, before.Evidence.Rejected, "a counter about to be adopted is not rejected")
	assert.Equal(t, measurePending("hw"), before.Evidence.Pending)
	require.Eventually(t, func() bool { return c.Info().Source == "hw" }, 2*time.Second, time.Millisecond)
	in := c.Info()
	assert.Contains(t, []string{rateMeasured.String(), rateRefined.String()}, in.RateOrigin)
	assert.InDelta(t, 1e9, float64(in.Rate), 1e9*(in.RateErrorPPM+1)*1e-6, "%+v", in)
	assert.Empty(t, in.Evidence.Rejected)
	assert.Empty(t, in.Evidence.Pending)
}

// fakeTimeClock returns a clock in the calling testing/synctest bubble on
// a 64-bit counter at hz that follows the bubble's time (plus what jump
// holds, in ns), adopted and watched against the bubble's time, its
// background goroutine started.
func fakeTimeClock(t *testing.T, hz float64, jump *atomic.Int64) (*Clock, *tracker) {
	start := time.Now()
	fake := func() int64 { return int64(time.Since(start)) }
	hw := Source{Name: "hw", Bits: 64, Rate: uint64(hz), Read: func() uint64 { return uint64(float64(fake()+jump.Load()) * hz / 1e9) }}
	tr := &tracker{ref: fake, witness: fake, src: hw, adopted: true}
	c, err := newClock(hw, rating{hz: hz, origin: rateDeclared}, tr)
	require.NoError(t, err)
	c.start()
	return c, tr
}

// TestRefinementsWaitForTheWatch makes the counter jump forward between
// two of the watch's ticks, with the wall map in use, so that the
// background goroutine also wakes every 100 ms for it: a refinement that
// falls due then must wait for the watch, which sees the jump and
// re-anchors, rather than measure a rate across the jump.
func TestRefinementsWaitForTheWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var jump atomic.Int64
		c, _ := fakeTimeClock(t, 1e9, &jump)
		defer c.Close()
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
					c.WallTime(c.Now()) // keeps the wall map's 100 ms ticks going
				}
			}
		}()
		// The refinement schedule's 16 s point falls between the watch's
		// ticks at 15.5 s and 17.5 s.
		bubbleSleep(15600 * time.Millisecond)
		jump.Store(int64(time.Second))
		worst := 0.0
		for i := 0; i < 50; i++ {
			bubbleSleep(100 * time.Millisecond)
			worst = max(worst, math.Abs(float64(c.Info().Rate)/1e9-1)*1e6)
		}
		close(stop)
		<-done
		in := c.Info()
		assert.Less(t, worst, 1.0, "a refinement adopted a rate %.0f ppm off, measured across the jump", worst)
		assert.Equal(t, 1, in.Watch.Reanchors)
		assert.Contains(t, in.Watch.LastReanchor, "jumped forward")
	})
}

// TestAPanickingReferenceNeverStopsTheFolds gives a clock on a narrow
// counter (21 bits at 1 MHz: a wrap every 2.1 s, folded every 262 ms) a
// reference that always panics: the tracking backs off, and the folds go
// on, so that no wrap is lost and Now never goes back.
func TestAPanickingReferenceNeverStopsTheFolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		fake := func() int64 { return int64(time.Since(start)) }
		hw := Source{Name: "narrow", Bits: 21, Rate: 1_000_000, Read: func() uint64 { return uint64(fake() / 1000) }}
		tr := &tracker{ref: func() int64 { panic("reference on fire") }, witness: fake, src: hw, adopted: true}
		c, err := newClock(hw, rating{hz: 1e6, origin: rateDeclared}, tr)
		require.NoError(t, err)
		c.start()
		defer c.Close()
		prev, back := c.nanos(), 0
		for i := 0; i < 1000; i++ {
			bubbleSleep(10 * time.Millisecond)
			if now := c.nanos(); now < prev {
				back++
			} else {
				prev = now
			}
		}
		c.st.mu.Lock()
		in, wakes := c.infoLocked(), c.st.loop.wakes
		c.unlock()
		t.Logf("10 s: %d faults, %d wake-ups, clock %v, %d steps back", in.Faults, wakes, time.Duration(prev), back)
		assert.Zero(t, back, "Now went back")
		assert.InDelta(t, float64(10*time.Second), float64(prev), float64(20*time.Millisecond), "wraps lost")
		assert.Zero(t, in.LostWraps)
		assert.Positive(t, in.Faults)
		assert.Less(t, wakes, 200, "the faults made the goroutine spin")
	})
}

// BenchmarkRefine is one refinement of the rate against the raw clock:
// the 32 bracketed samples and the switch to the new rate.
func BenchmarkRefine(b *testing.B) {
	c, err := New(Portable(), WithReference(rawNow))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	c.st.mu.Lock()
	defer c.unlock()
	tr := c.st.track
	tr.startLocked(time.Now(), &c.st.cur)
	tr.cal.step = len(calibrationSchedule) // the sliding phase: always adopts
	tr.cal.history = []ratePoint{tr.cal.baseline}
	for b.Loop() {
		c.applyLocked(tr, time.Now(), tr.refine(time.Now(), new(c.viewLocked()), tr.point(&c.st.cur)))
	}
}

// TestAnExactRateIsNeverRefined: a counter that counts nanoseconds by
// construction (a paravirtual clock's page, rateNanoseconds) is watched
// against its reference but its rate is never replaced by a measurement,
// not even by the sliding refinements that follow drift after the
// calibration schedule (64 s on). Here the reference runs 0.3 ppm fast,
// within what the watch tolerates: a refinement would follow it. In a
// testing/synctest bubble, so that the 200 s take none.
func TestAnExactRateIsNeverRefined(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		fake := func() int64 { return int64(time.Since(start)) }
		ref := func() int64 { return fake() + fake()*3/10_000_000 }
		hw := Source{Name: "page", Bits: 64, Rate: 1e9, Read: func() uint64 { return uint64(fake()) }}
		tr := &tracker{ref: ref, witness: fake, src: hw, adopted: true, endsOnRegister: true}
		c, err := newClock(hw, rating{hz: 1e9, origin: rateNanoseconds}, tr)
		require.NoError(t, err)
		c.start()
		defer c.Close()
		bubbleSleep(200 * time.Second)
		in := c.Info()
		assert.Equal(t, rateNanoseconds.String(), in.RateOrigin, "%+v", in)
		assert.Equal(t, uint64(1e9), in.Rate)
		assert.Zero(t, in.Watch.Reanchors, in.Watch.LastReanchor)
	})
}

// lyingCounter is a 1 GHz counter on a testing/synctest bubble's time
// that can lie: heldBy is added to every read (a counter held far
// ahead), and the read numbered onceAt (counting every read) returns
// onceBy more, once (one garbage value, as a TSC value just below a
// paravirtual page's stamp wraps the page's delta).
type lyingCounter struct {
	start time.Time
	// slowPPM makes the counter's time, and its reference's, run that
	// many ppm slower than the bubble's, the witness.
	slowPPM int64
	heldBy  atomic.Uint64
	// refBroken makes the reference panic; readPanics makes that many
	// reads of the counter panic.
	refBroken  atomic.Bool
	readPanics atomic.Int64
	reads      atomic.Int64
	onceAt     atomic.Int64
	onceBy     uint64
}

// now is the counter's time: the reference's.
func (l *lyingCounter) now() int64 {
	d := int64(time.Since(l.start))
	return d - d/1e6*l.slowPPM
}

func (l *lyingCounter) read() uint64 {
	if l.readPanics.Load() > 0 && l.readPanics.Add(-1) >= 0 {
		panic("counter on fire")
	}
	v := uint64(l.now()) + l.heldBy.Load()
	if l.reads.Add(1) == l.onceAt.Load() {
		v += l.onceBy
	}
	return v
}

// lyingClock returns a clock in the calling bubble on a lying counter,
// adopted and watched against the bubble's time (the reference and the
// witness), its background goroutine started.
func lyingClock(t *testing.T, onceBy uint64) (*Clock, *lyingCounter, func() int64) {
	t.Helper()
	return lyingClockSlow(t, onceBy, 0)
}

// lyingClockSlow is lyingClock with a counter and a reference that run
// slowPPM slower than the witness.
func lyingClockSlow(t *testing.T, onceBy uint64, slowPPM int64) (*Clock, *lyingCounter, func() int64) {
	t.Helper()
	l := &lyingCounter{start: time.Now(), onceBy: onceBy, slowPPM: slowPPM}
	ref := l.now
	witness := func() int64 { return int64(time.Since(l.start)) }
	broken := func() int64 {
		if l.refBroken.Load() {
			panic("reference broken")
		}
		return ref()
	}
	hw := Source{Name: "liar", Bits: 64, Rate: 1e9, Read: l.read}
	tr := &tracker{ref: broken, witness: witness, src: hw, adopted: true}
	c, err := newClock(hw, rating{hz: 1e9, origin: rateDeclared}, tr)
	require.NoError(t, err)
	c.start()
	return c, l, ref
}

// Readings a counter cannot have produced: one far ahead of its
// reference (a paravirtual page's delta wrapped: 8.8e18 ns, 279 years),
// one that carries the clock past math.MaxInt64, and a 10 s jump.
var farAhead = []struct {
	name string
	by   uint64
}{{"wrapped", 8_800_000_000_000_000_000}, {"saturating", 3 << 62}, {"10s", uint64(10 * time.Second)}}

// TestAFarAheadReadingOnceIsNeverAdopted hands one garbage value to each
// of the reads the background goroutine makes over a watch's tick, in a
// testing/synctest bubble, while no reader reads the clock: the watch's
// brackets and its fold (a tick with no refinement due), and the
// brackets of a refinement's point, which comes first where one is due
// (the first and last two, and two in the middle: in a bubble the
// counter stands still through a tick, and the point's step probe reads
// it thousands of times after them). None of them may carry the clock
// away from its reference, and none may re-anchor it.
func TestAFarAheadReadingOnceIsNeverAdopted(t *testing.T) {
	var watchReads []int64
	for k := int64(1); k <= 2*watchSamples+2; k++ {
		watchReads = append(watchReads, k)
	}
	pointReads := []int64{1, 2, bracketSamples - 1, bracketSamples, 2*bracketSamples - 1, 2 * bracketSamples}
	for _, far := range farAhead {
		for _, tick := range []struct {
			what   string
			refine bool
			reads  []int64
		}{{"watch", false, watchReads}, {"refinement", true, pointReads}} {
			for _, k := range tick.reads {
				t.Run(fmt.Sprintf("%s/%s/read%d", far.name, tick.what, k), func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						c, l, ref := lyingClock(t, far.by)
						defer c.Close()
						bubbleSleep(time.Second)
						off := c.nanos() - ref()
						c.st.mu.Lock()
						c.st.track.cal.due = time.Now().Add(time.Hour) // none in the next tick
						if tick.refine {
							c.st.track.cal.due = time.Now() // one in the next tick
						}
						l.onceAt.Store(l.reads.Load() + k)
						c.unlock()
						bubbleSleep(3 * time.Second)
						require.Greater(t, l.reads.Load(), l.onceAt.Load(), "the garbage value was never read")
						prev := int64(math.MinInt64)
						for i := 0; i < 100; i++ {
							now := c.nanos()
							require.NotEqual(t, int64(math.MaxInt64), now, "the clock saturated")
							require.InDelta(t, float64(ref()+off), float64(now), float64(time.Millisecond),
								"%v from its reference after %d readings (%+v)", time.Duration(now-ref()-off), i, c.Info())
							require.GreaterOrEqual(t, now, prev, "Now went back")
							prev = now
							bubbleSleep(10 * time.Millisecond)
						}
						assert.Zero(t, c.Info().Watch.Reanchors, c.Info().Watch.LastReanchor)
					})
				})
			}
		}
	}
}

// heldReading is a reading of a clock on a lying counter: the
// reference's, the clock's.
type heldReading struct{ at, now int64 }

// standsStillThenFollows checks readings of a clock whose counter went
// far ahead after from (a reference reading): no reading is below one
// before it; from settle after from, the clock stands still at one
// value, held, until its reference's timeline (the reference plus off)
// reaches it; from a watch period after that, the clock is on that
// timeline. It returns held.
func standsStillThenFollows(t *testing.T, rs []heldReading, from, off int64, settle time.Duration) (held int64) {
	t.Helper()
	held = math.MinInt64
	prev := int64(math.MinInt64)
	for _, r := range rs {
		require.GreaterOrEqual(t, r.now, prev, "Now went back, at %v of the reference", time.Duration(r.at))
		prev = r.now
		if held == math.MinInt64 && r.at >= from+int64(settle) {
			held = r.now
		}
	}
	require.NotEqual(t, int64(math.MinInt64), held, "no reading %v after the jump", settle)
	for _, r := range rs {
		switch {
		case r.at < from+int64(settle):
		case r.at+off < held:
			require.Equal(t, held, r.now, "the clock moved while its timeline was %v behind the value it holds, at %v of the reference", time.Duration(held-r.at-off), time.Duration(r.at))
		case r.at+off >= held+int64(watchPeriod):
			require.InDelta(t, float64(r.at+off), float64(r.now), float64(time.Millisecond),
				"%v from the reference's timeline, at %v of the reference, after it caught up with %v", time.Duration(r.now-r.at-off), time.Duration(r.at), time.Duration(held))
		}
	}
	return held
}

// TestAFarAheadCounterHeldIsNotAdopted holds the counter far ahead for
// 2.5 s and then lets it behave again, in a testing/synctest bubble,
// reading the clock every 10 ms for 15 s. Readers read the counter
// themselves: until the watch sees it, they read what it says (nothing
// above a Source can stop that: the Source must not produce such
// values). What the watch must do: within a watch period and a rate
// probe, refuse it, and then never follow it, nor go below what readers
// read: the clock stands still at the highest value a reader may have
// read until its reference's timeline reaches it (10 s on, for a 10 s
// jump; centuries on, or never, for a wrapped delta and a value past
// math.MaxInt64), whatever the counter does meanwhile, and goes on on
// that timeline; Info says what happened, that the clock stands still
// and for how long.
func TestAFarAheadCounterHeldIsNotAdopted(t *testing.T) {
	for _, far := range farAhead {
		t.Run(far.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, l, ref := lyingClock(t, 0)
				defer c.Close()
				bubbleSleep(time.Second)
				off := c.nanos() - ref()
				settle := maxWatchPeriod + rateProbe + 10*time.Millisecond
				var rs []heldReading
				var inHeld Info
				l.heldBy.Store(far.by)
				from := ref()
				for ref()-from < int64(15*time.Second) {
					if ref()-from >= int64(2500*time.Millisecond) && l.heldBy.Load() != 0 {
						inHeld = c.Info()
						l.heldBy.Store(0)
					}
					rs = append(rs, heldReading{ref(), c.nanos()})
					bubbleSleep(10 * time.Millisecond)
				}
				in := c.Info()
				t.Logf("held: %+v", inHeld.Watch)
				t.Logf("end: %+v", in.Watch)
				held := standsStillThenFollows(t, rs, from, off, settle)
				saturated := far.name == "saturating"
				if saturated {
					assert.Equal(t, int64(math.MaxInt64), held)
				} else {
					assert.InDelta(t, float64(far.by), float64(held-from-off), float64(settle), "held %v past the jump", time.Duration(held-from-off))
				}
				// Info named the jump and the stand-still while the counter was
				// far ahead, and the end of the stand-still once the timeline
				// caught up (never, past math.MaxInt64 or centuries ahead).
				assert.Equal(t, 1, inHeld.Watch.CounterFaults, inHeld.Watch.LastCounterFault)
				assert.Contains(t, inHeld.Watch.LastCounterFault, "liar: read ")
				assert.Contains(t, inHeld.Watch.LastCounterFault, "ahead of the reference")
				assert.Contains(t, inHeld.Watch.LastCounterFault, "the clock stands still at ")
				assert.Contains(t, inHeld.Watch.LastCounterFault, " (at ")
				assert.Equal(t, saturated, strings.Contains(inHeld.Watch.LastCounterFault, "past math.MaxInt64"), inHeld.Watch.LastCounterFault)
				assert.True(t, inHeld.Watch.Holding)
				if !saturated {
					assert.InDelta(t, float64(far.by), float64(inHeld.Watch.StandStill), float64(time.Millisecond))
				}
				assert.Equal(t, 1, in.Watch.CounterFaults, in.Watch.LastCounterFault)
				if far.name == "10s" {
					assert.False(t, in.Watch.Holding)
					assert.Equal(t, 2, in.Watch.Reanchors, in.Watch.LastReanchor)
					assert.Contains(t, in.Watch.LastReanchor, "stood still until the reference's timeline reached")
					assert.InDelta(t, float64(far.by), float64(in.Watch.StandStill), float64(watchPeriod))
				} else {
					assert.True(t, in.Watch.Holding)
					assert.Equal(t, 1, in.Watch.Reanchors, in.Watch.LastReanchor)
				}
			})
		})
	}
}

// TestTimelineAnchorKeepsOnlyWhatTheReferenceExplains checks the
// re-anchoring's rule on its own: a clock value V ahead of the
// reference's timeline is followed on at the counter's pace only up to
// what the reference counted since the last good comparison, and never
// more than maxWatchPeriod (a watch that ran late, 10 s after its last
// comparison, does not make a 5 s lead explicable); beyond that the
// clock stands still at V (readers may have read it: never below it),
// and refused says by how much V was ahead.
func TestTimelineAnchorKeepsOnlyWhatTheReferenceExplains(t *testing.T) {
	g := clockSample{clock: 100e9, ref: 50e9}
	for _, tc := range []struct {
		name             string
		elapsed, ahead   time.Duration
		kept             bool
		wantRefusedAhead time.Duration
	}{
		{"within the elapsed time", 100 * time.Millisecond, 60 * time.Millisecond, true, 0},
		{"more than twice the reference's pace", 100 * time.Millisecond, 150 * time.Millisecond, false, 150 * time.Millisecond},
		{"within maxWatchPeriod of a late watch", 10 * time.Second, maxWatchPeriod, true, 0},
		{"past maxWatchPeriod of a late watch", 10 * time.Second, 5 * time.Second, false, 5 * time.Second},
		{"saturated", 10 * time.Second, time.Duration(math.MaxInt64 - 110e9), false, time.Duration(math.MaxInt64 - 110e9)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refNow := g.ref + int64(tc.elapsed)
			onTimeline := g.clock + int64(tc.elapsed)
			var refused farReading
			anchor := timelineAnchor(func() uint64 { return 7 }, func() int64 { return refNow }, g, &refused)
			_, ns, _, hold := anchor(7, onTimeline+int64(tc.ahead), 0)
			assert.Equal(t, onTimeline+int64(tc.ahead), ns, "never below V")
			assert.Equal(t, !tc.kept, hold, "stands still")
			assert.Equal(t, int64(tc.wantRefusedAhead), refused.ahead)
			assert.Equal(t, tc.name == "saturated", refused.saturated)
			if !tc.kept {
				assert.Equal(t, int64(tc.elapsed), refused.elapsed)
				assert.Equal(t, onTimeline+int64(tc.ahead), refused.held)
			}
		})
	}
}

// TestAFarAheadCounterAcrossARestart holds the counter far ahead while
// the watch restarts (its reference panicked for a second, in a
// testing/synctest bubble): the first comparison after a restart has no
// good comparison of its own to go by, and must not take the counter's
// far reading for the clock's timeline. From a watch period and a rate
// probe after the restart, the clock stands still, while the counter is
// still far ahead and after it behaved again, until its reference's
// timeline reaches what readers read, and then follows that timeline.
func TestAFarAheadCounterAcrossARestart(t *testing.T) {
	for _, far := range farAhead {
		t.Run(far.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, l, ref := lyingClock(t, 0)
				defer c.Close()
				bubbleSleep(time.Second)
				off := c.nanos() - ref()
				var rs []heldReading
				read := func(d time.Duration) {
					for end := ref() + int64(d); ref() < end; {
						rs = append(rs, heldReading{ref(), c.nanos()})
						bubbleSleep(10 * time.Millisecond)
					}
				}
				l.refBroken.Store(true)
				l.heldBy.Store(far.by)
				read(time.Second)
				l.refBroken.Store(false)
				restarted := ref()
				read(1500 * time.Millisecond)
				l.heldBy.Store(0)
				read(15 * time.Second)
				in := c.Info()
				t.Logf("%+v", in.Watch)
				require.Positive(t, in.Faults, "the reference's panics were not seen")
				standsStillThenFollows(t, rs, restarted, off, maxWatchPeriod+rateProbe+10*time.Millisecond)
				assert.Equal(t, 1, in.Watch.CounterFaults, in.Watch.LastCounterFault)
			})
		})
	}
}

// TestANarrowCountersGarbageIsNeverFolded gives a 23-bit counter at 1 MHz
// (a wrap every 8.4 s, folded every 1.05 s: more often than the watch's
// 2 s) one garbage value half a wrap ahead, at the first read at or
// after each of a grid of instants that covers the watch's ticks and the
// folds between them, in a testing/synctest bubble, while no reader reads
// the clock. No fold may adopt it: a fold between two of the watch's
// comparisons is confirmed against the reference as the watch's own are.
func TestANarrowCountersGarbageIsNeverFolded(t *testing.T) {
	for i := 0; i < 44; i++ {
		at := 4*time.Second + time.Duration(i)*50*time.Millisecond
		t.Run(fmt.Sprint(at), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				ref := func() int64 { return int64(time.Since(start)) }
				var after atomic.Int64
				after.Store(int64(at))
				read := func() uint64 {
					v := uint64(ref() / 1000)
					if a := after.Load(); a > 0 && ref() >= a && after.CompareAndSwap(a, 0) {
						v += 1 << 22
					}
					return v
				}
				hw := Source{Name: "narrow", Bits: 23, Rate: 1e6, Read: read}
				tr := &tracker{ref: ref, witness: ref, src: hw, adopted: true}
				c, err := newClock(hw, rating{hz: 1e6, origin: rateDeclared}, tr)
				require.NoError(t, err)
				c.start()
				defer c.Close()
				require.Less(t, c.st.conv.refreshPeriod(), maxWatchPeriod)
				bubbleSleep(3900 * time.Millisecond)
				off := c.nanos() - ref()
				bubbleSleep(at + 3*time.Second - 3900*time.Millisecond)
				require.Zero(t, after.Load(), "the garbage value was never read")
				prev := int64(math.MinInt64)
				for i := 0; i < 100; i++ {
					now := c.nanos()
					require.InDelta(t, float64(ref()+off), float64(now), float64(time.Millisecond),
						"%v from its reference (%+v)", time.Duration(now-ref()-off), c.Info())
					require.GreaterOrEqual(t, now, prev, "Now went back")
					prev = now
					bubbleSleep(10 * time.Millisecond)
				}
				assert.Zero(t, c.Info().Watch.Reanchors, c.Info().Watch.LastReanchor)
			})
		})
	}
}

// TestAStepWithinTheRateProbeIsNoRate makes the counter step back 1 s,
// which the watch sees and re-anchors after measuring the counter's rate
// over rateProbe, and then jump 5 s forward within that probe, in a
// testing/synctest bubble. The probe's two points then span the jump: a
// "rate" of 500 GHz that the counter does not keep, which the
// re-anchoring must not adopt (the clock would stand nearly still until
// the next watch). The counter and the reference move one count and one
// nanosecond at every read of the counter, so that a rate can be
// measured within one of the bubble's instants.
func TestAStepWithinTheRateProbeIsNoRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var reads, step atomic.Int64
		read := func() uint64 {
			return uint64(int64(time.Since(start)) + reads.Add(1) + step.Load())
		}
		ref := func() int64 { return int64(time.Since(start)) + reads.Load() }
		hw := Source{Name: "stepper", Bits: 64, Rate: 1e9, Read: read}
		tr := &tracker{ref: ref, witness: ref, src: hw, adopted: true}
		c, err := newClock(hw, rating{hz: 1e9, origin: rateDeclared}, tr)
		require.NoError(t, err)
		c.start()
		defer c.Close()
		bubbleSleep(time.Second)
		step.Add(-int64(time.Second))
		probing := func() bool {
			c.st.mu.Lock()
			defer c.unlock()
			return c.st.track != nil && c.st.track.probe != nil
		}
		for !probing() {
			bubbleSleep(time.Millisecond)
		}
		step.Add(int64(5 * time.Second))
		bubbleSleep(rateProbe + 5*time.Millisecond)
		in := c.Info()
		require.GreaterOrEqual(t, in.Watch.Reanchors, 1, "%+v", in)
		assert.NotContains(t, in.Watch.LastReanchor, "rate changed")
		assert.InEpsilon(t, 1e9, float64(in.Rate), 1e-3, "%+v", in)
	})
}

// TestTheWitnessIsReadInTheNarrowestBracket: the witness the reference is
// checked against is read inside the bracket the comparison keeps, not
// after the rest of the samples. Here every sample's last bracket stops
// 5 ms inside its second counter read (what a preemption on a loaded
// machine does): a witness read after it would be 5 ms late, and a
// reference that agrees with it to the nanosecond would be called slow.
// In a testing/synctest bubble: the stall is the bubble's 5 ms exactly.
func TestTheWitnessIsReadInTheNarrowestBracket(t *testing.T) {
	// inBubble runs f in a testing/synctest bubble with a tracker whose
	// counter, reference and witness read the bubble's time, and whose
	// every perSample-th counter read stalls 5 ms while stall is set.
	type stalling struct {
		tr        *tracker
		ln        line
		stall     atomic.Bool
		reads     atomic.Int64
		perSample int64
	}
	inBubble := func(t *testing.T, f func(t *testing.T, s *stalling)) {
		synctest.Test(t, func(t *testing.T) {
			s := &stalling{}
			start := time.Now()
			now := func() int64 { return int64(time.Since(start)) }
			read := func() uint64 {
				if n := s.reads.Add(1); s.stall.Load() && n%s.perSample == 0 {
					bubbleSleep(5 * time.Millisecond)
				}
				return uint64(now())
			}
			s.tr = &tracker{ref: now, witness: now, src: Source{Read: read}}
			s.ln = line{read: read, conv: portableConversion}
			f(t, s)
		})
	}
	t.Run("comparison", func(t *testing.T) {
		inBubble(t, func(t *testing.T, s *stalling) {
			s.perSample = 2 * watchSamples
			a := s.tr.sample(s.ln)
			s.stall.Store(true)
			s.reads.Store(0)
			b := s.tr.sample(s.ln)
			assert.Less(t, b.halfWidth, int64(time.Millisecond), "the stalled bracket was kept")
			assert.Empty(t, referenceOff(b.ref-a.ref, b.mono-a.mono), "a reference equal to its witness misjudged")
		})
	})
	t.Run("rate point", func(t *testing.T) {
		inBubble(t, func(t *testing.T, s *stalling) {
			a := s.tr.point(&s.ln)
			s.perSample = 2 * bracketSamples
			s.reads.Store(0)
			s.stall.Store(true)
			b := s.tr.point(&s.ln)
			s.stall.Store(false)
			assert.Empty(t, referenceOff(b.ns-a.ns, b.mono-a.mono), "a reference equal to its witness misjudged")
		})
	})
}

// TestNarrowCountersAreWatchedUnwrapped watches correct counters of
// every width, 8 to 64 bits, each at a rate whose wrap the refresh
// allows, against a reference that counts the same time, for 10 s of a
// testing/synctest bubble (the refinement schedule up to 8 s), read
// every 10 ms. Each counter runs 30 ppm faster than its declared rate,
// so that the rate must be refined. A narrow counter wraps many times
// over the baselines its rate is measured on: its progress must be read
// as the clock counted it, never modulo its width. No reading may step
// back, the watch may refuse nothing and re-anchor nothing, the refined
// rate must be within its stated error of the truth, and the clock must
// end where the reference is. The witness is the bubble's time too (the
// runtime's would take the bubble's reference for one that jumps).
func TestNarrowCountersAreWatchedUnwrapped(t *testing.T) {
	for _, tc := range []struct {
		bits int
		hz   uint64
	}{{8, 256}, {12, 4096}, {16, 65536}, {20, 1_000_000}, {20, 1 << 20}, {24, 10_000_000}, {32, 1_000_000_000}, {64, 1_000_000_000}} {
		t.Run(fmt.Sprintf("%d bits at %d Hz", tc.bits, tc.hz), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				ref := func() int64 { return int64(time.Since(start)) }
				mask := maskOf(tc.bits)
				const ppm = 30
				truth := float64(tc.hz) * (1 + ppm*1e-6)
				read := func() uint64 {
					hi, lo := bits.Mul64(uint64(ref()), tc.hz*(1e6+ppm))
					cyc, _ := bits.Div64(hi, lo, 1e15)
					return cyc & mask
				}
				hw := Source{Name: "narrow", Bits: tc.bits, Rate: tc.hz, Read: read}
				tr := &tracker{ref: ref, witness: ref, src: hw, adopted: true}
				c, err := newClock(hw, rating{hz: float64(tc.hz), origin: rateDeclared}, tr)
				require.NoError(t, err)
				c.start()
				defer c.Close()
				off := c.nanos() - ref()
				prev, back, deepest := c.nanos(), 0, int64(0)
				for i := 0; i < 1000; i++ {
					bubbleSleep(10 * time.Millisecond)
					if now := c.nanos(); now < prev {
						back++
						deepest = max(deepest, prev-now)
					} else {
						prev = now
					}
				}
				in := c.Info()
				tick := float64(time.Second) / truth
				end := c.nanos() - ref() - off
				t.Logf("rate %d Hz (%s, ±%.3f ppm), %v from the reference, %d steps back (deepest %v)",
					in.Rate, in.RateOrigin, in.RateErrorPPM, time.Duration(end), back, time.Duration(deepest))
				assert.Zero(t, back, "Now stepped back, by up to %v", time.Duration(deepest))
				assert.Zero(t, in.Watch.CounterFaults, in.Watch.LastCounterFault)
				assert.Zero(t, in.Watch.Reanchors, in.Watch.LastReanchor)
				assert.Equal(t, rateRefined.String(), in.RateOrigin)
				assert.InDelta(t, truth, float64(in.Rate), truth*in.RateErrorPPM*1e-6+0.5, "%+v", in)
				assert.InDelta(t, 0, float64(end), max(float64(time.Millisecond), 2*tick), "the clock ended %v from its reference", time.Duration(end))
			})
		})
	}
}

// TestARefusedJumpHoldsTheClock makes a watched 1 GHz counter jump 10 s
// ahead and stay there, in a testing/synctest bubble, read every 10 ms:
// readers see the jump before the watch does, and the watch refuses it
// (more than its reference counted). No reading may ever be below one
// already returned: the clock stands still at the highest value a
// reader may have read until its reference's timeline reaches it (10 s
// of the reference, at most, plus the watch's look), and then goes on
// on that timeline at the counter's rate. Info says the clock stands
// still while it does, and for how long. The clock looks again when the
// reference should have caught up, by the runtime's clock: a reference
// 500 ppm slower (as far as NTP steers CLOCK_MONOTONIC from
// CLOCK_MONOTONIC_RAW) has not, and the clock must wait for it.
func TestARefusedJumpHoldsTheClock(t *testing.T) {
	for _, slowPPM := range []int64{0, 500} {
		t.Run(fmt.Sprintf("a reference %d ppm slower than the runtime's clock", slowPPM), func(t *testing.T) {
			refusedJumpHolds(t, slowPPM)
		})
	}
}

func refusedJumpHolds(t *testing.T, slowPPM int64) {
	synctest.Test(t, func(t *testing.T) {
		c, l, ref := lyingClockSlow(t, 0, slowPPM)
		defer c.Close()
		bubbleSleep(time.Second)
		off := c.nanos() - ref()
		const jump = 10 * time.Second
		l.heldBy.Store(uint64(jump))
		type reading struct{ ref, now int64 }
		var rs []reading
		var holding Info
		for range 1500 {
			rs = append(rs, reading{ref(), c.nanos()})
			if in := c.Info(); in.Watch.Holding && !holding.Watch.Holding {
				holding = in
			}
			bubbleSleep(10 * time.Millisecond)
		}
		in := c.Info()
		t.Logf("while holding: %+v", holding.Watch)
		t.Logf("at the end: %+v", in.Watch)
		// The longest run of equal readings: the stand-still, at held.
		back, deepest, from, longest, held := 0, time.Duration(0), 0, time.Duration(0), int64(0)
		for i := 1; i < len(rs); i++ {
			if rs[i].now < rs[i-1].now {
				back++
				deepest = max(deepest, time.Duration(rs[i-1].now-rs[i].now))
			}
			if rs[i].now != rs[from].now {
				from = i
			} else if d := time.Duration(rs[i].ref - rs[from].ref); d > longest {
				longest, held = d, rs[i].now
			}
		}
		assert.Zero(t, back, "Now stepped back, by up to %v", deepest)
		assert.InDelta(t, float64(jump), float64(longest), float64(maxWatchPeriod), "the clock stood still %v", longest)
		// From one watch period after the reference's timeline reached
		// the value held, the clock goes on on it, at its pace.
		last := rs[len(rs)-1]
		assert.InDelta(t, float64(last.ref+off), float64(last.now), float64(time.Millisecond), "%v from the reference's timeline", time.Duration(last.now-last.ref-off))
		caughtUp := int64(math.MaxInt64)
		for _, r := range rs {
			if r.ref+off >= held {
				caughtUp = r.ref
				break
			}
		}
		require.Less(t, caughtUp, last.ref-int64(time.Second), "the reference's timeline never caught up with %v", time.Duration(held))
		for _, r := range rs {
			if r.ref >= caughtUp+int64(watchPeriod) {
				pace := float64(last.now-r.now) / float64(last.ref-r.ref)
				assert.InDelta(t, 1, pace, 0.01, "the clock's pace against its reference from %v", time.Duration(r.ref))
				break
			}
		}
		assert.Equal(t, 1, in.Watch.CounterFaults, in.Watch.LastCounterFault)
		assert.GreaterOrEqual(t, in.Watch.Reanchors, 1)
		assert.True(t, holding.Watch.Holding, "Info never said the clock stands still")
		assert.InDelta(t, float64(jump), float64(holding.Watch.StandStill), float64(maxWatchPeriod), "while holding")
		assert.False(t, in.Watch.Holding)
		assert.InDelta(t, float64(jump), float64(in.Watch.StandStill), float64(maxWatchPeriod), "at the end")
	})
}

// TestAStandStillWhoseEndPanicsIsRetried makes the counter's Read panic
// 20 times in a row from the moment the reference's timeline catches up
// with a stand-still, in a testing/synctest bubble: the re-anchoring
// that ends it fails, the clock stands still as it was, and it is tried
// again a watch period later (not at once: the background goroutine
// would spin), until it succeeds.
func TestAStandStillWhoseEndPanicsIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, l, ref := lyingClock(t, 0)
		defer c.Close()
		bubbleSleep(time.Second)
		off := c.nanos() - ref()
		l.heldBy.Store(uint64(10 * time.Second))
		bubbleSleep(maxWatchPeriod + rateProbe)
		require.True(t, c.Info().Watch.Holding, "%+v", c.Info().Watch)
		held := c.nanos()
		bubbleSleep(time.Duration(held-ref()-off) - time.Millisecond)
		c.st.mu.Lock()
		wakes := c.st.loop.wakes
		c.unlock()
		l.readPanics.Store(20)
		bubbleSleep(time.Second)
		assert.Equal(t, held, c.nanos(), "the clock moved while its re-anchoring failed")
		c.st.mu.Lock()
		wakes = c.st.loop.wakes - wakes
		c.unlock()
		assert.Less(t, wakes, 30, "the failed re-anchoring was retried at once")
		bubbleSleep(4 * time.Second)
		in := c.Info()
		assert.False(t, in.Watch.Holding, "%+v", in.Watch)
		assert.Positive(t, in.Faults)
		assert.InDelta(t, float64(ref()+off), float64(c.nanos()), float64(time.Millisecond))
	})
}

// TestARefinementNeverAdoptsAJump: a counter that jumps forward while a
// refinement riding on the watch's tick takes its measurement is the
// watch's business, not a rate: no refinement adopts the jump as a rate
// (1.167 GHz, a 50 ms jump over the 300 ms since its baseline, before
// the fix), and the watch re-anchors it as a jump. The counter jumps at
// the measurement's first read after the test arms it (found on the
// reader's stack: in a bubble a jump at a time of its own lands before
// or after the whole tick, never inside it).
func TestARefinementNeverAdoptsAJump(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var jump atomic.Int64
		var armed atomic.Bool
		read := func() uint64 {
			if armed.Load() && calledFrom("schedclock.(*tracker).point") && !calledFrom("schedclock.(*tracker).startLocked") {
				armed.Store(false)
				jump.Store(50e6) // 50 ms ahead, less than the watch's period
			}
			return uint64(1e12 + int64(time.Since(start)) + jump.Load())
		}
		refStart := time.Now()
		c, err := New(Source{Name: "wild", Bits: 64, Rate: 1e9, Read: read},
			WithReference(func() int64 { return int64(time.Since(refStart)) }))
		require.NoError(t, err)
		defer c.Close()
		c.st.mu.Lock()
		c.st.track.witness = bubbleWallNow // as New gives a caller's Source in a bubble (this one is the package's own code)
		c.unlock()
		bubbleSleep(300 * time.Millisecond) // the watch has agreed a few times
		armed.Store(true)
		var rates []uint64
		for range 40 { // 4 s: several refinements and watch periods
			bubbleSleep(100 * time.Millisecond)
			rates = append(rates, c.Info().Rate)
		}
		require.False(t, armed.Load(), "no refinement read the counter")
		in := c.Info()
		for _, hz := range rates {
			assert.InDelta(t, 1e9, float64(hz), 1e9*(watchDriftPPM+in.RateErrorPPM)*1e-6, "a rate adopted: %d Hz", hz)
		}
		assert.Equal(t, 1, in.Watch.Reanchors, in.Watch.LastReanchor)
		assert.Contains(t, in.Watch.LastReanchor, "jumped forward")
	})
}

// calledFrom reports whether fn (a function's full name) is on the
// caller's stack.
func calledFrom(fn string) bool {
	pc := make([]uintptr, 32)
	frames := runtime.CallersFrames(pc[:runtime.Callers(2, pc)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, fn) {
			return true
		}
		if !more {
			return false
		}
	}
}
