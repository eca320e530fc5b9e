package schedclock_test

import (
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
)

// The calibration and the watch (calibrate.go) through the public API: a
// clock made with WithReference refines its rate against the reference
// and watches its counter, re-anchoring through the freezer when the
// counter steps, jumps or changes rate. calibrate_internal_test.go holds
// the tests that need the tracker itself.

// A misbehaving counter that runs on the time package's clock (a
// testing/synctest bubble's, in the tests here): from the instant t0 of
// its current segment it counts at rate Hz from c0. Tests make it step,
// jump or change rate; the reference is the same clock (monoRef).
type segment struct {
	t0   time.Time
	c0   float64
	rate float64
}

type wildCounter struct{ seg atomic.Pointer[segment] }

func newWildCounter(rate float64) *wildCounter {
	w := &wildCounter{}
	w.seg.Store(&segment{t0: time.Now(), c0: 1e12, rate: rate})
	return w
}

func (w *wildCounter) Read() uint64 {
	s := w.seg.Load()
	return uint64(s.c0 + time.Since(s.t0).Seconds()*s.rate)
}

// change makes the counter jump by cycles and go on at rate from now.
func (w *wildCounter) change(cycles, rate float64) {
	s := w.seg.Load()
	now := time.Now()
	w.seg.Store(&segment{t0: now, c0: s.c0 + now.Sub(s.t0).Seconds()*s.rate + cycles, rate: rate})
}

func (w *wildCounter) source(rate uint64) schedclock.Source {
	return schedclock.Source{Name: "wild", Bits: 64, Rate: rate, Read: w.Read}
}

// monoRef is a reference clock: the time package's (a bubble's fake
// time inside one, against which a Clock made there also checks it).
func monoRef() func() int64 {
	start := time.Now()
	return func() int64 { return int64(time.Since(start)) }
}

// watchedClock returns a clock on a wild 1 GHz counter watched against a
// reference, and a recorder of every reading a goroutine takes until
// stop is called: readings, the deepest step back, and how many.
func watchedClock(t *testing.T) (*schedclock.Clock, *wildCounter, func() int64, *recorder) {
	t.Helper()
	w := newWildCounter(1e9)
	ref := monoRef()
	c, err := schedclock.New(w.source(1e9), schedclock.WithReference(ref))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	rec := &recorder{}
	rec.run(c)
	t.Cleanup(rec.stop)
	return c, w, ref, rec
}

// recorder reads a clock in a loop and keeps the deepest step back.
type recorder struct {
	done      atomic.Bool
	wg        sync.WaitGroup
	mu        sync.Mutex
	backSteps int
	deepest   schedclock.Instant
}

func (r *recorder) run(c *schedclock.Clock) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		last := c.Now()
		for !r.done.Load() {
			now := c.Now()
			if now < last {
				r.mu.Lock()
				r.backSteps++
				r.deepest = max(r.deepest, last-now)
				r.mu.Unlock()
			}
			last = now
			bubbleSleep(20 * time.Microsecond)
		}
	}()
}

func (r *recorder) stop() {
	r.done.Store(true)
	r.wg.Wait()
}

func (r *recorder) result() (backSteps int, deepest time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.backSteps, time.Duration(r.deepest)
}

// keepsPace checks that, over d from when the clock's offset to its
// reference was from, the clock keeps the reference's pace: within a
// millisecond, or within what the clock's own stated rate error explains
// over d where that is more (a refinement measured under load, its
// brackets wide, adopts a rate with a wide error and says so).
func keepsPace(t *testing.T, c *schedclock.Clock, ref func() int64, from time.Duration, d time.Duration, what string) {
	t.Helper()
	before := c.Info()
	bubbleSleep(d)
	in := c.Info()
	ppm := max(before.RateErrorPPM, in.RateErrorPPM)
	assert.InDelta(t, float64(from), float64(offset(c, ref)), max(float64(time.Millisecond), 2*float64(d)*ppm*1e-6),
		"%s: rate %d Hz (%s, ±%.1f ppm), %d Hz before", what, in.Rate, in.RateOrigin, in.RateErrorPPM, before.Rate)
}

// offset is the clock's reading less the reference's, from the
// tightest of a few brackets.
func offset(c *schedclock.Clock, ref func() int64) time.Duration {
	best, off := int64(math.MaxInt64), int64(0)
	for i := 0; i < 20; i++ {
		a := int64(c.Now())
		r := ref()
		b := int64(c.Now())
		if b-a < best {
			best, off = b-a, a+(b-a)/2-r
		}
	}
	return time.Duration(off)
}

// waitReanchors waits, as long as the clock needs by its own account
// (several watch periods; the background goroutine may run late on a
// loaded machine), until Info().Watch.Reanchors reaches n.
func waitReanchors(t *testing.T, c *schedclock.Clock, n int) schedclock.Info {
	t.Helper()
	require.Eventually(t, func() bool { return c.Info().Watch.Reanchors >= n }, 5*time.Second, time.Millisecond,
		"the watch did not re-anchor: %+v", c.Info())
	return c.Info()
}

func TestWatchPutsASteppedBackCounterBackOnItsTimeline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, w, ref, rec := watchedClock(t)
		bubbleSleep(300 * time.Millisecond) // past the first refinements
		before := offset(c, ref)
		stepAt := time.Now()
		w.change(-10e9, 1e9) // 10 s back: a snapshot restore
		in := waitReanchors(t, c, 1)
		took := time.Since(stepAt)
		t.Logf("re-anchored after %v: %s", took, in.Watch.LastReanchor)
		assert.Contains(t, in.Watch.LastReanchor, "behind")
		after := offset(c, ref)
		assert.InDelta(t, float64(before), float64(after), float64(5*time.Millisecond), "offset to the reference %v before, %v after", before, after)
		rec.stop()
		backSteps, deepest := rec.result()
		// The only dip: readers clamp at the epoch, which the watch keeps at
		// most one watch period (100 ms) old, until the watch re-anchors.
		assert.LessOrEqual(t, backSteps, 1, "deepest %v", deepest)
		assert.Less(t, deepest, 250*time.Millisecond, "dipped by %v", deepest)
		// And it goes on at the reference's pace.
		keepsPace(t, c, ref, after, 200*time.Millisecond, "pace")
		assert.Equal(t, 1, c.Info().Watch.Reanchors)
	})
}

// A jump forward that the reference's progress could explain (the
// counter ran at most twice its pace since the watch's last comparison)
// is kept: readers cannot tell it from a stopped process whose reference
// ran on too, and what they saw stands.
func TestWatchReanchorsAJumpForward(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, w, ref, rec := watchedClock(t)
		bubbleSleep(300 * time.Millisecond)
		before := offset(c, ref)
		w.change(50e6, 1e9) // 50 ms forward, less than the watch's period
		in := waitReanchors(t, c, 1)
		t.Logf("re-anchored: %s; reference %q", in.Watch.LastReanchor, in.Watch.Reference)
		assert.Contains(t, in.Watch.LastReanchor, "jumped forward")
		after := offset(c, ref)
		// What readers saw stands: the clock keeps the jump, never steps
		// back, and goes on at the reference's pace.
		assert.InDelta(t, float64(before+50*time.Millisecond), float64(after), float64(time.Millisecond))
		keepsPace(t, c, ref, after, 200*time.Millisecond, "pace after the jump")
		rec.stop()
		backSteps, deepest := rec.result()
		assert.Zero(t, backSteps, "deepest %v", deepest)
		assert.Equal(t, 1, c.Info().Watch.Reanchors)
		assert.Zero(t, c.Info().Watch.CounterFaults, c.Info().Watch.LastCounterFault)
	})
}

// A process stopped for a while (SIGSTOP, a VM pause) finds its counter
// and its reference both gone on: nothing to re-anchor.
func TestWatchAcceptsCounterAndReferenceMovingTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &schedclock.FakeCounter{}
		var refNs atomic.Int64
		c, err := schedclock.New(f.Source("manual", 64, 1e9), schedclock.WithReference(refNs.Load))
		require.NoError(t, err)
		defer c.Close()
		for i := 0; i < 5; i++ {
			f.Add(10e9)
			refNs.Add(10e9)
			assert.Equal(t, schedclock.Instant(i+1)*10e9, c.Now())
			bubbleSleep(150 * time.Millisecond) // a watch period or more
		}
		assert.Zero(t, c.Info().Watch.Reanchors, c.Info().Watch.LastReanchor)
	})
}

func TestWatchFollowsARateChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, w, ref, rec := watchedClock(t)
		bubbleSleep(300 * time.Millisecond)
		w.change(0, 1.1e9) // the hypervisor changed the TSC frequency by 10%
		in := waitReanchors(t, c, 1)
		t.Logf("re-anchored: %s", in.Watch.LastReanchor)
		assert.Contains(t, in.Watch.LastReanchor, "rate changed")
		assert.InEpsilon(t, 1.1e9, float64(in.Rate), 1e-3)
		after := offset(c, ref)
		keepsPace(t, c, ref, after, 300*time.Millisecond, "pace after the rate change")
		rec.stop()
		backSteps, deepest := rec.result()
		assert.Zero(t, backSteps, "deepest %v", deepest)
	})
}

// A counter whose declared rate is off by 20 ppm (within what drift may
// explain) is refined, not re-anchored, and keeps its reference's pace.
func TestReferenceRefinesTheRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWildCounter(1e9 * (1 + 20e-6))
		ref := monoRef()
		c, err := schedclock.New(w.source(1e9), schedclock.WithReference(ref))
		require.NoError(t, err)
		defer c.Close()
		require.Eventually(t, func() bool {
			in := c.Info()
			return in.RateOrigin == "refined" && in.RateErrorPPM < 2
		}, 5*time.Second, time.Millisecond)
		in := c.Info()
		assert.InDelta(t, 1e9*(1+20e-6), float64(in.Rate), 1e9*(in.RateErrorPPM+1)*1e-6, "%+v", in)
		assert.Zero(t, in.Watch.Reanchors, in.Watch.LastReanchor)
		a := offset(c, ref)
		bubbleSleep(500 * time.Millisecond)
		in = c.Info()
		// Over 0.5 s the clock keeps the reference's pace within the rate's
		// own error, plus a microsecond for the two brackets.
		assert.InDelta(t, float64(a), float64(offset(c, ref)), 0.5e9*in.RateErrorPPM*1e-6+1e3, "%+v", in)
	})
}

// While suspended the watch stands aside: a counter that steps back then
// is not the watch's business, and Resume starts it afresh.
func TestWatchStandsAsideWhileSuspended(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, w, ref, _ := watchedClock(t)
		bubbleSleep(150 * time.Millisecond)
		c.Suspend()
		frozen := c.Now()
		w.change(-50e9, 1e9) // reset across suspend
		bubbleSleep(300 * time.Millisecond)
		assert.Equal(t, frozen, c.Now())
		assert.Zero(t, c.Info().Watch.Reanchors)
		c.Resume()
		a := offset(c, ref)
		bubbleSleep(300 * time.Millisecond)
		assert.Zero(t, c.Info().Watch.Reanchors, c.Info().Watch.LastReanchor)
		assert.InDelta(t, float64(a), float64(offset(c, ref)), float64(time.Millisecond))
	})
}

// After a Register on a clock made by New with a reference, calibration
// and the watch move to the new source.
func TestReferenceFollowsARegister(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _, ref, rec := watchedClock(t)
		bubbleSleep(150 * time.Millisecond)
		w2 := newWildCounter(3e9 * (1 - 10e-6))
		require.NoError(t, c.Register(w2.source(3e9)))
		require.Eventually(t, func() bool {
			in := c.Info()
			return in.Source == "wild" && in.RateOrigin == "refined" && in.RateErrorPPM < 2
		}, 5*time.Second, time.Millisecond)
		assert.InDelta(t, 3e9*(1-10e-6), float64(c.Info().Rate), 3e9*3e-6)
		w2.change(-5e9, 3e9)
		waitReanchors(t, c, 1)
		a := offset(c, ref)
		keepsPace(t, c, ref, a, 200*time.Millisecond, "pace")
		rec.stop()
		backSteps, _ := rec.result()
		assert.LessOrEqual(t, backSteps, 1)
	})
}
