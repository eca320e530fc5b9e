package schedclock

import (
	"math"

	"github.com/schedclock/schedclock/internal/vdso"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// Wall time. Time maps a reading of the clock to the wall clock through a
// piecewise-linear map that the clock's background goroutine keeps close
// to time.Now: every wallPeriod it pairs a reading with the wall clock (a
// bracket, fastest of wallSamples) and aims the map at it. The map
// follows NTP's slewing (its slope is re-estimated at every pairing) and
// its steps (a disagreement beyond wallStep is taken at once, backwards
// too), and it is never discontinuous otherwise: each new segment starts
// wallLead in the future, where the current one would have gone, so a
// goroutine that reads the clock and then the map sees an increasing
// wall time whether it gets the old map or the new one.

const (
	// wallPeriod is how often the map is aimed again at the wall clock.
	wallPeriod = 100 * time.Millisecond
	// wallLead is how far ahead of the pairing a new segment starts.
	wallLead = 10 * time.Millisecond
	// wallStep is the disagreement taken as a step of the wall clock.
	wallStep = time.Millisecond
	// wallMaxSlew bounds the map's slope to 1±wallMaxSlew, twice the
	// kernel's largest slew (500 ppm).
	wallMaxSlew = 1e-3
	// wallSamples is how many (clock, wall, clock) brackets a pairing
	// takes.
	wallSamples = 8
)

// wallSegment maps clock readings to Unix nanoseconds linearly: at clock
// reading at the wall time is wall, and the slope is 1 + slope/2^32.
type wallSegment struct {
	at, wall, slope int64
}

// wallAt saturates: no reading maps past the int64 range (time.Unix's
// range ends in 2262), so no reading a clock returns maps before another
// one it returned earlier.
func (g *wallSegment) wallAt(ns int64) int64 {
	d := subSat(ns, g.at)
	return addSat(addSat(g.wall, d), mulShift32(d, g.slope))
}

// subSat is a-b saturated to the int64 range.
func subSat(a, b int64) int64 {
	if b == math.MinInt64 {
		if a >= 0 {
			return math.MaxInt64
		}
		return a - b
	}
	return addSat(a, -b)
}

// mulShift32 is floor(d*s / 2^32), in 128 bits when the product needs it.
func mulShift32(d, s int64) int64 {
	if -1<<31 < d && d < 1<<31 && -1<<31 < s && s < 1<<31 {
		return d * s >> 32
	}
	hi, lo := bits.Mul64(uint64(abs(d)), uint64(abs(s)))
	q := int64(hi<<32 | lo>>32)
	if (d < 0) != (s < 0) {
		if lo<<32 != 0 {
			q++ // floor, not truncation, so that the map stays monotonic
		}
		return -q
	}
	return q
}

// wallMap is one version of the map: cur from cur.at on, the previous
// segment before it. A new version keeps the previous one's segment,
// bit for bit, up to where the new segment takes over.
type wallMap struct {
	prev, cur wallSegment
	// used says Time read this version (set once per version, by the
	// first Time); stale says the map is no longer refreshed, so the next
	// Time pairs the clock with the wall clock again.
	used, stale atomic.Bool
}

// wallAt maps the clock reading ns to Unix nanoseconds.
func (m *wallMap) wallAt(ns int64) int64 {
	if ns < m.cur.at {
		return m.prev.wallAt(ns)
	}
	return m.cur.wallAt(ns)
}

// segmentAt is the segment that maps ns.
func (m *wallMap) segmentAt(ns int64) wallSegment {
	if ns < m.cur.at {
		return m.prev
	}
	return m.cur
}

// Time returns the wall-clock time at which the clock read ns (a value
// Now returned), mapped through the pairings of the clock with time.Now
// that the clock's goroutine keeps fresh (see wall.go). The first call
// takes the first pairing and starts the refreshing.
//
// The result carries no monotonic clock reading (as time.Unix's results
// do not): it is a wall time computed from a reading of another clock,
// and a monotonic reading of the runtime's would claim a precision and an
// origin it does not have. Compare readings of the clock, not Times, to
// measure durations.
//
// The wall clock is the kernel's CLOCK_REALTIME, read directly (through
// the vDSO on Linux), not time.Now: inside a testing/synctest bubble
// time.Now is the bubble's fake time, and Time stays on the real one. On
// a clock on a Manual counter, Time is the Manual's wall origin plus ns
// (see Manual), exactly. Time saturates: Time(math.MaxInt64) is in 2262,
// never before the clock's start.
//
// The map is refreshed only while Time is called: wallIdlePeriods
// periods without a call stop the refreshing, and the next Time pairs
// the clock with the wall clock again before it answers.
func (c *Clock) Time(ns int64) time.Time {
	if c.clockState == nil {
		return time.Unix(0, ns) // a zero Clock
	}
	if mc := c.manual.Load(); mc != nil {
		return time.Unix(0, mc.wallAt(ns))
	}
	m := c.wall.Load()
	if m == nil || m.stale.Load() {
		m = c.startWall()
	}
	if !m.used.Load() {
		m.used.Store(true)
	}
	return time.Unix(0, m.wallAt(ns))
}

// wallIdlePeriods is how many wall periods without a Time stop the
// refreshing of the map.
const wallIdlePeriods = 3

// WallNow returns the default clock's time as wall-clock time,
// Default().Time(Now()): time.Now without its monotonic reading, read
// from the counter. It follows the wall clock within about 100µs
// (TestWallNowFollowsTheWallClock), and a goroutine's successive
// readings never decrease except across a step of the wall clock
// backwards.
func WallNow() time.Time {
	return defaultClock.Time(defaultClock.Now())
}

// startWall takes the first pairing and has the background goroutine
// keep it fresh.
func (c *Clock) startWall() *wallMap {
	c.wakeFirstUse()
	c.mu.Lock()
	defer c.unlock()
	if m := c.wall.Load(); m != nil && !m.stale.Load() {
		return m
	}
	if c.wallNow == nil {
		c.wallNow = realWallNow
	}
	c.refreshWallLocked()
	c.wallIdle = 0
	if !c.stoppedLocked() {
		c.wallDue = time.Now().Add(wallPeriod)
		c.kick()
	}
	return c.wall.Load()
}

// tickWallLocked is the background goroutine's wall work: refresh the
// map while Time is being called, stop once it has not been for
// wallIdlePeriods periods.
func (c *Clock) tickWallLocked(now time.Time) {
	if m := c.wall.Load(); m != nil && !m.used.Load() {
		if c.wallIdle++; c.wallIdle >= wallIdlePeriods {
			m.stale.Store(true)
			c.wallDue = time.Time{}
			return
		}
	} else {
		c.wallIdle = 0
	}
	c.refreshWallLocked()
	c.wallDue = now.Add(wallPeriod)
}

// realWallNow reads the real wall clock, CLOCK_REALTIME, never a
// synctest bubble's fake time; time.Now where this package cannot read
// it directly.
func realWallNow() time.Time {
	if wc := realtimeVDSO(); wc != nil {
		return time.Unix(0, wc.Now())
	}
	return time.Now()
}

// realtimeVDSO is CLOCK_REALTIME through internal/vdso, nil where it has
// none; looked up at the first Time, not at import.
var realtimeVDSO = sync.OnceValue(func() *vdso.Clock {
	c, err := vdso.Open(vdso.Realtime)
	if err != nil {
		return nil
	}
	return c
})

// refreshWallLocked pairs the clock with the wall clock and aims the map
// at the pairing.
func (c *Clock) refreshWallLocked() {
	best, clock, wall := int64(math.MaxInt64), int64(0), int64(0)
	for i := 0; i < wallSamples; i++ {
		before := c.Now()
		w := c.wallNow().UnixNano()
		after := c.Now()
		if after-before < best {
			best, clock, wall = after-before, before+(after-before)/2, w
		}
	}
	old := c.wall.Load()
	pair := c.lastWallPair
	c.lastWallPair = [2]int64{clock, wall}
	if old == nil || abs(old.wallAt(clock)-wall) > int64(wallStep) {
		// The first pairing, or a step of the wall clock: take it at once.
		g := wallSegment{at: clock, wall: wall}
		c.wall.Store(&wallMap{prev: g, cur: g})
		return
	}
	// The new segment starts wallLead ahead, where the map already goes,
	// with the slope that brings it to the wall clock a period later, the
	// wall clock's own pace taken from the last two pairings.
	pace := 1.0
	if pair[0] != 0 && clock > pair[0] {
		pace = float64(wall-pair[1]) / float64(clock-pair[0])
	}
	at := clock + int64(wallLead)
	from := old.wallAt(at)
	target := float64(wall) + float64(at+int64(wallPeriod)-clock)*pace
	slope := min(max((target-float64(from))/float64(wallPeriod), 1-wallMaxSlew), 1+wallMaxSlew)
	c.wall.Store(&wallMap{
		prev: old.segmentAt(at),
		cur:  wallSegment{at: at, wall: from, slope: int64(math.Round((slope - 1) * (1 << 32)))},
	})
}

// wallState is the Clock's side of the wall map.
type wallState struct {
	wall         atomic.Pointer[wallMap]
	wallNow      func() time.Time // time.Now; tests give a fake wall clock
	wallDue      time.Time        // zero until Time is first called
	lastWallPair [2]int64         // the last pairing: clock, wall
	wallIdle     int              // refreshes in a row that Time did not use
}
