package schedclock

import (
	"math"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeWall is a wall clock that runs at 1+slew times the time package's
// clock (a testing/synctest bubble's, in one), from an offset that a test
// can step.
type fakeWall struct {
	start time.Time
	base  int64
	slew  atomic.Int64 // in units of 1e-9
	step  atomic.Int64
	// The slew is applied from the last change on, so that the clock is
	// continuous when it changes.
	at, atWall atomic.Int64
}

func newFakeWall() *fakeWall {
	return &fakeWall{start: time.Now(), base: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC).UnixNano()}
}

func (f *fakeWall) now() time.Time {
	el := int64(time.Since(f.start))
	at, atWall := f.at.Load(), f.atWall.Load()
	return time.Unix(0, f.base+f.step.Load()+atWall+int64(float64(el-at)*(1+float64(f.slew.Load())*1e-9)))
}

func (f *fakeWall) setSlew(ppm float64) {
	el := int64(time.Since(f.start))
	f.atWall.Store(f.now().UnixNano() - f.base - f.step.Load())
	f.at.Store(el)
	f.slew.Store(int64(ppm * 1e3))
}

// wallClock returns a clock on a 1 GHz counter that follows the time
// package's clock (a testing/synctest bubble's, in one, so that the
// pairings run on its schedule and its brackets are exact) whose wall map
// is aimed at fake.
func wallClock(t *testing.T, fake *fakeWall) *Clock {
	start := time.Now()
	c, err := New(Source{Name: "time", Bits: 64, Rate: 1e9, Read: func() uint64 { return uint64(time.Since(start)) }})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	c.st.mu.Lock()
	fakeNs := func() int64 { return fake.now().UnixNano() }
	c.st.wall.ref = refClock{read: fakeNs, quick: fakeNs}
	c.unlock()
	return c
}

// TestWallFollowsSlewAndSteps runs the wall map against a fake wall
// clock that slews by ±500 ppm (the kernel's largest slew) and steps
// forward and back: the map stays within 100µs of it a period after any
// change of pace, takes steps at once (within a period), and one
// goroutine's readings never decrease except across a step back. In a
// testing/synctest bubble: the pairings run on their schedule, with
// exact brackets, so the bound is the map's alone.
func TestWallFollowsSlewAndSteps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFakeWall()
		c := wallClock(t, fake)
		check := func(phase string, d time.Duration, stepBackAllowed bool) {
			deadline := time.Now().Add(d)
			settleUntil := time.Now().Add(2*wallPeriod + wallLead)
			last := c.WallTime(c.Now()).UnixNano()
			worst := int64(0)
			for time.Now().Before(deadline) {
				before := fake.now().UnixNano()
				got := c.WallTime(c.Now()).UnixNano()
				after := fake.now().UnixNano()
				want := min(max(got, before), after) // the nearest instant of the bracket
				if !stepBackAllowed {
					require.GreaterOrEqual(t, got, last, "%s: wall time went back", phase)
				}
				if time.Now().After(settleUntil) {
					worst = max(worst, abs(got-want))
				}
				last = got
				stepBackAllowed = stepBackAllowed && time.Now().Before(settleUntil)
				bubbleSleep(50 * time.Microsecond)
			}
			t.Logf("%s: worst |Time(Now()) - wall| after settling: %v", phase, time.Duration(worst))
			assert.LessOrEqual(t, worst, int64(100*time.Microsecond), phase)
		}
		check("steady", 400*time.Millisecond, false)
		fake.setSlew(500)
		check("slewing +500 ppm", 600*time.Millisecond, false)
		fake.setSlew(-500)
		check("slewing -500 ppm", 600*time.Millisecond, false)
		fake.setSlew(0)
		fake.step.Add(int64(3 * time.Second))
		check("after a step forward", 400*time.Millisecond, false)
		fake.step.Add(-int64(5 * time.Second))
		check("after a step back", 400*time.Millisecond, true)
	})
}

func TestWallMapIsMonotonicAcrossVersions(t *testing.T) {
	// A new version keeps every segment of the old one, bit for bit, up
	// to the new segment's start, and each only rises.
	old := (&wallMap{segs: []wallSegment{{at: 0, wall: 1e18}}}).with(wallSegment{at: 1e9, wall: 1e18 + 1e9, slope: -2147483})
	next := old.with(wallSegment{at: 3e9, wall: old.wallAt(3e9), slope: 1 << 21})
	for ns := int64(-2e9); ns < 6e9; ns += 999_983 {
		if ns < next.segs[len(next.segs)-1].at {
			require.Equal(t, old.wallAt(ns), next.wallAt(ns), "at %d", ns)
		}
		require.LessOrEqual(t, next.wallAt(ns), next.wallAt(ns+1), "at %d", ns)
		require.LessOrEqual(t, old.wallAt(ns), old.wallAt(ns+1), "at %d", ns)
	}
	// The history is bounded: past wallHistory segments the older half
	// goes, and the rest maps as before.
	m := old
	for i := range wallHistory + 10 {
		at := int64(4e9) + int64(i)*1e6
		m = m.with(wallSegment{at: at, wall: m.wallAt(at), slope: int64(i%7) << 16})
	}
	assert.LessOrEqual(t, len(m.segs), wallHistory)
	for ns := m.segs[0].at; ns < m.segs[len(m.segs)-1].at+1e9; ns += 333_331 {
		require.LessOrEqual(t, m.wallAt(ns), m.wallAt(ns+1), "at %d", ns)
	}
	// Far from the anchor the 128-bit product keeps it exact.
	g := wallSegment{at: 0, wall: 0, slope: -(1 << 20)}
	assert.Equal(t, int64(math.Floor(-1e15*float64(-(1<<20))/(1<<32)))-1e15, g.wallAt(-1e15))
	assert.Equal(t, int64(math.Floor(1e15*float64(-(1<<20))/(1<<32)))+1e15, g.wallAt(1e15))
}

// TestTimeOfAReadingSurvivesStepsAndSlew: the wall clock slews and steps
// both ways while Time is called; the wall time of readings taken before
// each change stays what it was, bit for bit, through every later
// version of the map.
func TestTimeOfAReadingSurvivesStepsAndSlew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFakeWall()
		c := wallClock(t, fake)
		var readings []int64
		var times []time.Time
		took := func() {
			r := c.nanos()
			readings, times = append(readings, r), append(times, c.WallTime(Instant(r)))
		}
		// follow calls Time until the map has taken the fake wall clock's
		// latest change (a period or two; bounded by a generous multiple).
		follow := func() {
			deadline := time.Now().Add(50 * wallPeriod)
			for time.Now().Before(deadline) {
				took()
				if abs(c.WallTime(c.Now()).UnixNano()-fake.now().UnixNano()) < int64(100*time.Microsecond) {
					return
				}
				bubbleSleep(time.Millisecond)
			}
			t.Fatalf("the map did not follow the wall clock within %v", 50*wallPeriod)
		}
		follow()
		fake.setSlew(500)
		bubbleSleep(3 * wallPeriod)
		follow()
		fake.step.Add(int64(3 * time.Second))
		follow()
		fake.step.Add(-int64(5 * time.Second))
		follow()
		fake.setSlew(-500)
		bubbleSleep(3 * wallPeriod)
		follow()
		for i, r := range readings {
			require.Equal(t, times[i], c.WallTime(Instant(r)), "reading %d of %d changed its wall time", i, len(readings))
		}
	})
}

// TestWallMapHoldsItsPairings runs the wall map against a fake wall clock
// late in the int64 range (2250, where a Unix time in float64 is rounded
// to 1024 ns) that runs 37 ppm fast (an NTP-slewed clock), first read
// in bursts of 200 every 50 ms for 1.5 s, then left idle for 3.5 s (the
// map refreshed at its idle pace) and read again: the map stays at the
// middle of [wall, wall] brackets around each Time(Now()), the median
// distance at most 50 ns, in each phase. The error of a pairing is its
// own: neither the epoch's size nor the time between pairings may add to
// it. In a testing/synctest bubble, whose brackets are exact (its time
// stands still while goroutines run), and so are the pairings'.
func TestWallMapHoldsItsPairings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFakeWall()
		fake.base = time.Date(2250, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
		fake.setSlew(37)
		c := wallClock(t, fake)
		measure := func(phase string, bursts int) {
			var dists, widths []int64
			for i := range bursts {
				if i > 0 {
					bubbleSleep(wallPeriod / 2)
				}
				for range 200 {
					a := fake.now().UnixNano()
					got := c.WallTime(c.Now()).UnixNano()
					b := fake.now().UnixNano()
					dists, widths = append(dists, abs(got-(a+(b-a)/2))), append(widths, b-a)
				}
			}
			n := len(dists)
			slices.Sort(dists)
			slices.Sort(widths)
			dist, width := time.Duration(dists[n/2]), time.Duration(widths[n/2])
			t.Logf("%s: median |Time(Now()) - middle| %v, p90 %v, median bracket %v", phase, dist, time.Duration(dists[n*9/10]), width)
			assert.LessOrEqual(t, dist, 50*time.Nanosecond, phase)
		}
		c.WallTime(c.Now())
		bubbleSleep(3*wallPeriod + wallLead) // the provisional map refined
		measure("read every 50 ms", 30)
		bubbleSleep(3500 * time.Millisecond)
		measure("after 3.5 s idle", 1)
	})
}

// TestWallAimMeetsThePairing: a map aimed at a pairing that finds it off
// (by more than wallTolerance, less than a step) meets the wall clock,
// as the pairing and the pace of the last two pairings extrapolate it,
// a period after the pairing (past the correction's end, at off/(wallMaxSlew/2)),
// within 2 ns (each segment's wallAt floors: the correction's end, then
// the pace from it), and goes on at that pace: at 2 s past it, within
// 1 ns per second more (the slope's own rounding is 2^-32). Late in the int64 range too (2250, where a Unix
// time in float64 is rounded to 1024 ns). No goroutine aims the map
// here (Time is never called), and the pairings are in the clock's
// future, so each new segment starts wallLead after its pairing, or
// wallLeadForward where it puts the map forward.
func TestWallAimMeetsThePairing(t *testing.T) {
	for _, year := range []int{2026, 2250} {
		for _, off := range []int64{-999, -300, -70, 45, 333, 4999} {
			c := wallClock(t, newFakeWall())
			w0 := time.Date(year, 1, 1, 0, 0, 0, 123, time.UTC).UnixNano()
			const ppm = 37
			clock0 := c.nanos() + int64(time.Hour)
			clock1 := clock0 + int64(wallPeriod)
			wall1 := w0 + int64(wallPeriod)*(1e6+ppm)/1e6
			c.st.mu.Lock()
			c.st.wall.aim(clock0, w0, c.nanos()+1, false)
			old := c.st.wall.m.Load()
			c.st.wall.aim(clock1, wall1+off, c.nanos()+1, false)
			m := c.st.wall.m.Load()
			c.unlock()
			pace := float64(wall1+off-w0) / float64(clock1-clock0)
			end := clock1 + int64(wallLead+wallPeriod)
			want := func(ns int64) int64 { return wall1 + off + int64(math.Round(float64(ns-clock1)*pace)) }
			// Differences: an int64 this large in float64 is rounded.
			assert.LessOrEqual(t, abs(m.wallAt(end)-want(end)), int64(2), "%d, %d ns off: a period after the pairing", year, off)
			// The correction is over after off/(wallMaxSlew/2), not a period.
			behind := wall1 + off - old.wallAt(clock1) // the old map's extrapolation missed by the pace too
			lead := int64(wallLead)
			if behind > 0 {
				lead = int64(wallLeadForward) // forward: sooner
			}
			fast := clock1 + lead + abs(behind)*int64(2/wallMaxSlew)
			assert.LessOrEqual(t, abs(m.wallAt(fast)-want(fast)), int64(2), "%d, %d ns off: where the correction ends", year, off)
			later := end + int64(2*time.Second)
			assert.LessOrEqual(t, abs(m.wallAt(later)-want(later)), int64(3), "%d, %d ns off: 2 s after it", year, off)
			assert.Equal(t, old.wallAt(clock1+lead-1), m.wallAt(clock1+lead-1), "readings before the new segment keep their wall time")
			assert.NotEqual(t, old.wallAt(clock1+lead+100_000), m.wallAt(clock1+lead+100_000), "the new segment starts a lead after the pairing")
		}
	}
}

// TestWallMapVersionsStayAsPublished: a new version that drops the old
// one's future segments (an aim earlier than the last one's end) leaves
// the old version, which readers may hold, as it was published.
func TestWallMapVersionsStayAsPublished(t *testing.T) {
	// Room to append in place, as the writer's backing array has.
	v1 := &wallMap{segs: append(make([]wallSegment, 0, 8),
		wallSegment{at: 0, wall: 1e18},
		wallSegment{at: 1e9, wall: 1e18 + 1e9, slope: 1 << 12},
		wallSegment{at: 2e9, wall: 1e18 + 2e9 + 1000, slope: 0})}
	published := slices.Clone(v1.segs)
	v2 := v1.with(wallSegment{at: 15e8, wall: v1.wallAt(15e8), slope: -(1 << 12)},
		wallSegment{at: 25e8, wall: 1e18 + 25e8, slope: 0})
	assert.Equal(t, published, v1.segs, "the old version changed under its readers")
	assert.Len(t, v2.segs, 4, "the old version's segment from 2e9 on is not the new one's")
	assert.Equal(t, v1.wallAt(15e8-1), v2.wallAt(15e8-1))
}

// TestWallFollowsARateChangeWhileIdle: a clock whose readings change
// pace (Register of its counter at another rate) while its wall map is at
// the idle pace, against a wall clock slewed by +500 ppm: the map is
// paired again at once, with the wall clock's pace measured from the
// last pairing moved onto the new rate, and stays within 20 µs of the
// wall clock for the seconds that follow. Measured across the change, the
// pace was 500 ppm off, and the map drifted that much until a later
// pairing.
func TestWallFollowsARateChangeWhileIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := newFakeWall()
		fake.setSlew(500)
		c := wallClock(t, fake)
		for end := time.Now().Add(3 * wallPeriod); time.Now().Before(end); bubbleSleep(time.Millisecond) {
			c.WallTime(c.Now()) // read: paired every period, the pace learned
		}
		bubbleSleep(3 * wallPeriod) // unread: the idle pace
		c.st.mu.Lock()
		src := c.st.src
		c.unlock()
		src.Rate = 1_000_500_000 // the same counter, declared 500 ppm faster: its readings 500 ppm slower
		require.NoError(t, c.Register(src))
		offBy := func() time.Duration {
			best, off := time.Duration(math.MaxInt64), time.Duration(0)
			for range 20 {
				a := fake.now()
				w := time.Unix(0, c.st.wall.m.Load().wallAt(c.nanos())) // no mark: the map stays idle
				b := fake.now()
				if d := b.Sub(a); d < best {
					best, off = d, w.Sub(a)-d/2
				}
			}
			return off
		}
		var worst time.Duration
		for end := time.Now().Add(2 * time.Second); time.Now().Before(end); bubbleSleep(50 * time.Millisecond) {
			worst = max(worst, offBy().Abs())
		}
		t.Logf("worst %v", worst)
		assert.Less(t, worst, 20*time.Microsecond, "the wall map after a change of the readings' pace, idle")
	})
}

// TestTheWallRefresherSlowsOnceUnread drives the wall map's refresher
// (tickLocked) by hand on a closed clock (no background goroutine, no
// timers): a map read since the last refresh is refreshed every
// wallPeriod; one left unread for wallIdlePeriods refreshes slows to
// the idle pace (asleep, due wallIdlePeriod*3/2 later), and a read wakes
// it back to the period. A refresher that never cleared its read mark
// would refresh a map read once every period for the life of the
// process.
func TestTheWallRefresherSlowsOnceUnread(t *testing.T) {
	c, err := New(Portable())
	require.NoError(t, err)
	require.NoError(t, c.Close())
	fake := newFakeWall()
	c.st.mu.Lock()
	fakeNs := func() int64 { return fake.now().UnixNano() }
	c.st.wall.ref = refClock{read: fakeNs, quick: fakeNs}
	c.unlock()
	r := &c.st.wall
	tick := func() time.Duration {
		now := time.Now()
		c.st.mu.Lock()
		defer c.unlock()
		c.tickLocked(r, now)
		return r.due.Sub(now)
	}
	c.WallTime(c.Now()) // the first use: the map made, marked read
	assert.Equal(t, wallPeriod, tick(), "a map read since the last refresh")
	assert.False(t, r.asleep.Load())
	for i := range wallIdlePeriods - 1 {
		assert.Equal(t, wallPeriod, tick(), "unread for %d refreshes, fewer than wallIdlePeriods", i+1)
	}
	assert.Equal(t, wallIdlePeriod*3/2, tick(), "unread for wallIdlePeriods refreshes: the idle pace")
	assert.True(t, r.asleep.Load(), "the refresher slowed down, not asleep")
	assert.Equal(t, wallIdlePeriod*3/2, tick(), "still unread: still the idle pace")
	c.WallTime(c.Now())
	assert.False(t, r.asleep.Load(), "a read leaves the refresher asleep")
	assert.Equal(t, wallPeriod, tick(), "read again: every period")
}
