package schedclock

import (
	"math"
	"math/bits"
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

func (g *wallSegment) wallAt(ns int64) int64 {
	d := ns - g.at
	return g.wall + d + mulShift32(d, g.slope)
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
func (c *Clock) Time(ns int64) time.Time {
	if c.clockState == nil {
		return time.Unix(0, ns) // a zero Clock
	}
	m := c.wall.Load()
	if m == nil {
		m = c.startWall()
	}
	return time.Unix(0, m.wallAt(ns))
}

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
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.wall.Load(); m != nil {
		return m
	}
	if c.wallNow == nil {
		c.wallNow = time.Now
	}
	c.refreshWallLocked()
	if !c.stoppedLocked() {
		c.wallDue = time.Now().Add(wallPeriod)
		c.kick()
	}
	return c.wall.Load()
}

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
}
