package schedclock

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schedclock/schedclock/internal/vdso"
)

// Wall time. Time maps a reading of the clock to the wall clock through a
// piecewise-linear map that the clock's background goroutine keeps close
// to the wall clock: every wallPeriod it pairs a reading with the wall
// clock (a bracket, fastest of wallSamples) and, when the map has drifted
// from it by more than wallTolerance, aims the map at it with a new
// segment, and a second one after it at the wall clock's pace. The map
// follows NTP's slewing (its slope is re-estimated at every new segment)
// and its steps (a disagreement beyond wallStep is taken at once,
// backwards too). A new segment only ever starts after every reading
// the clock has returned (wallLead ahead of the pairing, or later if
// the writer was slow), and the segments before it are kept: the
// wall time of a reading never changes once the reading was taken
// (within the wallHistory segments kept), and the map is continuous
// except across a step, so a goroutine that reads the clock and then the
// map sees an increasing wall time whether it gets the old map or the
// new one.
//
// The first Time of a clock does not wait for that pairing: it answers
// from a provisional map made of one (clock, wall) pair, read through the
// cheapest path at hand, and has the background goroutine refine it,
// which it does with a new segment like any other.
//
// The map's own arithmetic must not be its error: a pairing is good to
// a few ns (WallNow sits at the middle of [time.Now, time.Now]
// brackets, TestWallNowInsideTimeNowBrackets), so slopes are computed
// from differences (a Unix time in float64 is rounded to 256 ns today),
// a correction ends where it meets the wall clock (a slope kept past its
// period overshoots), and the map is aimed again whenever it is found
// more than wallTolerance off, not only microseconds off.
//
// Idle: the map is aimed every wallPeriod only while Time is called.
// Readers mark the Clock (wallRead, one store per period at most); after
// wallIdlePeriods refresh(es) that found no mark, the refreshing slows to
// wallIdlePeriod and rides on the background goroutine's other wake-ups
// (the watch's, on the default clock), so that an idle process pays for
// no wake-up of its own. The first Time after that wakes the goroutine
// (a non-blocking send: readers never wait for the writer) and the map is
// paired at once and every wallPeriod again. Meanwhile the map has
// followed the wall clock at the idle pace: a step of the wall clock
// shows within 3/2 wallIdlePeriod, and a change of its slew costs at
// most that change times as much.

const (
	// wallPeriod is how often the map is aimed again at the wall clock
	// while Time is called.
	wallPeriod = 100 * time.Millisecond
	// wallIdlePeriod is about how often it is aimed when Time is not
	// called: at the first wake-up of the background goroutine from half
	// of it after the last pairing on, and at a wake-up of its own one
	// and a half of it after, only if nothing else woke the goroutine in
	// that window. The default clock's watch wakes it every
	// maxWatchPeriod, inside every such window, so the two share their
	// wake-ups.
	wallIdlePeriod = maxWatchPeriod
	// wallLead is how far ahead of the pairing a new segment starts.
	wallLead = 10 * time.Millisecond
	// wallLeadForward is the lead of a segment that puts the map
	// forward (it was behind the reference): a reading that maps through
	// the old segment for a writer held up past it maps lower than the
	// new one would map it, never higher, so the map stays monotonic;
	// only a reading's wall time would change after it was taken, up,
	// by at most the correction.
	wallLeadForward = 500 * time.Microsecond
	// wallStep is the disagreement taken as a step of the wall clock.
	wallStep = time.Millisecond
	// wallMaxSlew bounds the map's slope to 1±wallMaxSlew, twice the
	// kernel's largest slew (500 ppm).
	wallMaxSlew = 1e-3
	// wallSamples is how many (clock, wall, clock) brackets a pairing
	// takes.
	wallSamples = 8
	// wallQuickSamples is how many a provisional pairing takes: the
	// first reads of a process are slow and lopsided (cold caches, page
	// faults), so not one, and not so many that a first call waits.
	wallQuickSamples = 3
	// wallTolerance is how far the map may drift from a pairing before a
	// new segment re-aims it: below the spread of time.Now's own
	// brackets, so that WallNow stays at their
	// middle; a map whose slope is right stays within it for several
	// periods, and a segment per period while Time is called keeps the
	// history's 4096 segments for at least 7 minutes.
	wallTolerance = 20 * time.Nanosecond
	// wallHistory is how many segments the map keeps: a reading older
	// than the oldest kept segment's start maps through that segment.
	wallHistory = 4096
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

// wallMap is one version of the map: segs in increasing order of at,
// the last one current. A new version keeps every segment of the one
// before, bit for bit (see wallHistory), and adds one that takes over
// from its start on. Versions share segs' backing array: only the writer
// appends, past the end of every published version.
type wallMap struct {
	segs []wallSegment
}

// wallAt maps the clock reading ns to Unix nanoseconds.
func (m *wallMap) wallAt(ns int64) int64 {
	g := m.segmentAt(ns)
	return g.wallAt(ns)
}

// segmentAt is the segment that maps ns: the last one that starts at or
// before ns, or the first one for a reading before them all.
func (m *wallMap) segmentAt(ns int64) wallSegment {
	last := len(m.segs) - 1
	if ns >= m.segs[last].at {
		return m.segs[last]
	}
	lo, hi := 0, last // segs[hi].at > ns
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if m.segs[mid].at > ns {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return m.segs[max(lo-1, 0)]
}

// with returns a new version: this one's segments and gs after them.
// Segments of this version that start at or after gs[0] go: they start
// in the future (every new segment starts after every reading taken so
// far), so nothing was mapped through them; but this version, which
// readers may still hold, keeps them, so the new one is a copy.
func (m *wallMap) with(gs ...wallSegment) *wallMap {
	segs := m.segs
	if n := len(segs); n > 1 && segs[n-1].at >= gs[0].at {
		for n > 1 && segs[n-1].at >= gs[0].at {
			n--
		}
		segs = segs[:n:n] // the appends below copy
	}
	if len(segs)+len(gs) > wallHistory {
		segs = append(make([]wallSegment, 0, wallHistory), segs[len(segs)-wallHistory/2:]...)
	}
	return &wallMap{segs: append(segs, gs...)}
}

// WallTime returns the wall-clock time at which the clock read t (an
// Instant its Now or Coarse returned). The clock is paired with the wall
// clock in the background, and the wall time of a reading never changes
// once the reading was taken: a new pairing, a step of the wall clock
// included, maps only readings taken after it (the map keeps its last
// 4096 segments, a new one only when it has drifted from the wall clock
// by more than 5µs: hours to days of them). The first call answers at
// once from one (clock, wall) pair and has the clock's goroutine refine
// the map.
//
// The result carries no monotonic clock reading (as time.Unix's results
// do not): it is a wall time computed from a reading of another clock.
// Subtract Instants, not WallTimes, to measure durations.
//
// The wall clock is the kernel's CLOCK_REALTIME, read directly (through
// the vDSO on Linux), not time.Now: inside a testing/synctest bubble
// time.Now is the bubble's fake time, and the default clock's WallTime,
// and that of a Clock on one of this package's Sources, stays on the
// real one, as their readings do. A Clock that New made inside a bubble
// on a Source of the caller's maps onto the bubble's wall clock
// (time.Now there) instead: such a Source reads the bubble's clock
// (time.Since), as the code under test does, and its readings move with
// the bubble's time, not the machine's. (A caller's Source that reads
// the machine's counter belongs outside the bubble: in one, its
// readings move with the machine's time and the wall clock its map
// follows with the bubble's.) On a clock on a schedclocktest.Manual
// counter, WallTime is the counter's wall origin plus t, exactly; on a
// clock on Bubble, the bubble's wall clock at the reading, exactly (see
// Bubble). Instants no
// Now of the clock returned (before its start) map through its first
// segment: WallTime(-1) is a nanosecond before WallTime(0), and
// WallTime(math.MinInt64) about 292 years before the clock's start.
// WallTime saturates: WallTime(math.MaxInt64) is in 2262, and nothing
// maps outside what time.Unix(0, ns) can say.
//
// The clock is paired with the wall clock again every 100 ms while
// WallTime is called; after a period without a call, every 1-3 s, and
// the next call has it paired at once (a step of the wall clock shows
// within 3 s, a change of its slew costs that change times 3 s at most).
func (c *Clock) WallTime(t Instant) time.Time {
	ns := int64(t)
	c = c.orDefault()
	if mc := c.st.exact.manual.Load(); mc != nil {
		return time.Unix(0, mc.wallAt(ns))
	}
	if o := c.st.exact.wallOrigin.Load(); o != nil {
		return time.Unix(0, addSat(*o, ns))
	}
	return time.Unix(0, c.mapAt(&c.st.wall, ns))
}

// mapAt maps the reading ns through r, made at its first use (a
// provisional map, refined in the background), and marks r used.
func (c *Clock) mapAt(r *pairedMap, ns int64) int64 {
	m := r.m.Load()
	if m == nil {
		m = c.startMap(r)
	}
	if !r.used.Load() {
		c.markUsed(r)
	}
	return m.wallAt(ns)
}

// markUsed tells the refresher that r was read, and wakes it if it had
// slowed down. The store comes before the look at asleep, and the
// refresher sets asleep before its last look at used, so at least one
// of them sees the other (sequentially consistent atomics).
func (c *Clock) markUsed(r *pairedMap) {
	r.used.Store(true)
	if r.asleep.Load() && r.asleep.CompareAndSwap(true, false) {
		c.kick()
	}
}

// wallIdlePeriods is how many wall periods without a Time slow the
// refreshing of the map to wallIdlePeriod.
const wallIdlePeriods = 1

// WallNow returns the default clock's time as wall-clock time,
// Default().WallTime(Now()): time.Now without its monotonic reading,
// read from the counter, cheaper than time.Now. It follows the wall clock
// within about 100µs, and a goroutine's successive readings never
// decrease except across a step of the wall clock backwards. Subtract
// Instants, not WallNows, to measure time.
func WallNow() time.Time {
	return defaultClock.WallTime(defaultClock.Now())
}

// startMap maps the clock provisionally onto r's reference, from one
// quick pairing, and has the background goroutine refine the map at
// once and keep it fresh.
func (c *Clock) startMap(r *pairedMap) *wallMap {
	// The first use's wake-up goes last: the woken thread may take this
	// CPU at the next system call (a loaded machine of two CPUs).
	defer c.wakeFirstUse()
	c.st.mu.Lock()
	// Nothing Info shows changes here: no snapshot to take (c.unlock
	// allocates one, and a first call that allocates touches fresh pages).
	defer c.st.mu.Unlock()
	if m := r.m.Load(); m != nil {
		return m
	}
	if r.ref.read == nil {
		r.ref = wallRef // the wall map's (the kernel maps have theirs: useKernelMaps)
	}
	r.keep = (*Clock).tickLocked
	clock, ref, _ := c.pair(r.ref.quick, wallQuickSamples)
	r.aim(clock, ref, c.nanos()+1, true)
	r.idle = 0
	if !c.stoppedLocked() {
		r.due = time.Now() // refined at the goroutine's next look
		c.kick()
	}
	return r.m.Load()
}

// quickWallNow reads the wall clock the cheapest way at hand: the vDSO
// once it has been looked up (the background goroutine does that);
// until then time.Now, when it is not a testing/synctest bubble's fake
// time, or else the system call.
func quickWallNow() int64 {
	if wc := realtimeReader.resolved.Load(); wc != nil {
		return wc.Now()
	}
	if t, ok := runtimeWallNow(); ok {
		return t.UnixNano()
	}
	if ns, ok := vdso.Syscall(vdso.Realtime); ok {
		return ns
	}
	return time.Now().UnixNano()
}

// pair takes samples brackets Now, read, Now and pairs the middle of
// the narrowest with its reading of the reference; width is that
// bracket's.
func (c *Clock) pair(read func() int64, samples int) (clock, ref, width int64) {
	width = math.MaxInt64
	for range samples {
		before := c.nanos()
		w := read()
		after := c.nanos()
		if after-before < width {
			width, clock, ref = after-before, before+(after-before)/2, w
		}
	}
	return clock, ref, width
}

// runtimeWallNow is time.Now, and whether it is the real wall clock:
// not a testing/synctest bubble's, whose time.Now is fake (from
// 2000-01-01 on) and carries no monotonic reading (see
// inSynctestBubble).
func runtimeWallNow() (time.Time, bool) {
	t := time.Now()
	return t, t != t.Round(0)
}

// dueLocked is whether the map is due for a pairing at now: its period
// has passed; at the idle pace, half of it has (the pairing then rides
// on a wake-up that was due anyway); a reader woke the goroutine from
// the idle pace; or the machine's time was disrupted (wallGeneration).
func (r *pairedMap) dueLocked(now time.Time) bool {
	if r.due.IsZero() {
		return false
	}
	if g := wallGeneration.Load(); g != r.generation {
		// BoundedWallNow saw the machine's time disrupted (a migration,
		// a restore, a suspend): pair again at once, the pace measured
		// afresh, as after a change of counter.
		r.generation = g
		r.rerated(0, 0)
		return true
	}
	if !r.slow {
		return !now.Before(r.due)
	}
	return !r.asleep.Load() || !now.Before(r.due.Add(-wallIdlePeriod))
}

// tickLocked is the background goroutine's work on r: aim the map
// every wallPeriod while it is being read, every wallIdlePeriod once it
// has not been for wallIdlePeriods periods.
func (c *Clock) tickLocked(r *pairedMap, now time.Time) {
	if r.used.Swap(false) {
		r.idle = 0
	} else if r.idle < wallIdlePeriods {
		r.idle++
	}
	r.slow = r.idle >= wallIdlePeriods
	if r.slow {
		r.asleep.Store(true)
		// A reader that marked the map after the Swap above may have
		// looked at asleep before it was set: look again.
		if r.used.Swap(false) {
			r.asleep.Store(false)
			r.idle, r.slow = 0, false
		}
	} else {
		r.asleep.Store(false)
	}
	clock, ref, width := c.pair(r.ref.read, wallSamples)
	r.bracket = width
	r.aim(clock, ref, c.nanos()+1, false)
	switch {
	case r.paceNext && r.lastPair[0] != 0:
		// The first pairing since another counter: the next one, a
		// period later, measures the wall clock's pace against it.
		r.paceNext = false
		r.due = now.Add(wallPeriod)
	case r.slow:
		// Due from half the period on (dueLocked), at the latest after
		// one and a half.
		r.due = now.Add(wallIdlePeriod * 3 / 2)
	default:
		r.due = now.Add(wallPeriod)
	}
}

// realWallNow reads the real wall clock, CLOCK_REALTIME, never a
// synctest bubble's fake time; time.Now where this package cannot read
// it directly.
func realWallNow() int64 {
	if wc := realtimeReader.open(); wc != nil {
		return wc.Now()
	}
	return time.Now().UnixNano()
}

// realtimeReader is CLOCK_REALTIME through internal/vdso: looked up by
// the first refinement of a wall map (in the background), not at import
// nor on a caller's first Time.
var realtimeReader = vdsoReader{id: vdso.Realtime}

// vdsoReader is one kernel clock through internal/vdso, looked up on its
// first open; resolved holds it once it is known, for readers that must
// not wait for the lookup.
type vdsoReader struct {
	id       vdso.ID
	once     sync.Once
	clock    *vdso.Clock // nil where there is none
	resolved atomic.Pointer[vdso.Clock]
}

// open looks the clock up (once; hundreds of µs), nil where this system
// has none.
func (v *vdsoReader) open() *vdso.Clock {
	v.once.Do(func() {
		if c, err := vdso.Open(v.id); err == nil {
			v.clock = c
			v.resolved.Store(c)
		}
	})
	return v.clock
}

// aim aims the map at the pairing (clock, ref), next being a reading
// later than every one the clock has returned: the first segment if
// there is no map; a new segment if the map has drifted from the pairing
// by more than wallTolerance; the map as it is otherwise. A provisional
// pairing (one quick read, for a caller waiting on it) is not kept as
// the last pairing whose pace the next one measures.
func (r *pairedMap) aim(clock, ref, next int64, provisional bool) {
	old := r.m.Load()
	pair := r.lastPair
	if !provisional {
		r.lastPair = [2]int64{clock, ref}
	}
	if old == nil {
		// The first map lives in r: a first use allocates nothing
		// (fresh heap pages cost a first call tens of µs each in a
		// virtual machine).
		r.firstSeg[0] = wallSegment{at: clock, wall: ref}
		r.first.segs = r.firstSeg[:]
		r.m.Store(&r.first)
		return
	}
	behind := ref - old.wallAt(clock)
	refining := r.provisional && !provisional
	r.provisional = provisional
	off := abs(behind)
	if !provisional && !refining {
		r.drift = max(r.drift, off)
	}
	if off <= int64(wallTolerance) && !r.repace {
		return
	}
	r.repace = false
	// The new segment starts after every reading taken so far (wallLead
	// ahead of the pairing, or later if the writer was held up longer),
	// so that no reading maps differently than it did when it was taken;
	// a correction forward soon after (wallLeadForward), so that a map
	// found behind after an idle spell (its slope a few ppb off for
	// seconds) is right by the first readings that woke it.
	lead := wallLead
	if behind > 0 {
		lead = wallLeadForward
	}
	at := max(clock+int64(lead), next)
	// A provisional map behind the first full pairing (its one read
	// was slow: a loaded or emulated machine) catches up at once, as a
	// step forward; ahead of it, it slews back, so that the map never
	// goes back for it. A reference without steps (r.monotone) is never
	// stepped back: the map slews back to it at 1-wallMaxSlew.
	if off > int64(wallStep) && (behind > 0 || !r.monotone) || refining && behind > 0 {
		// A step of the reference: taken from at on, at its own pace.
		r.m.Store(old.with(wallSegment{at: at, wall: addSat(ref, at-clock)}))
		return
	}
	// Two new segments: the first starts where the map already goes,
	// with the slope that brings it to the reference as soon as half the
	// largest slew allows (off/(wallMaxSlew/2): 80 µs for 40 ns), within
	// a period; the second goes on from there at the reference's own
	// pace, taken from the last two pairings. A correction kept past its
	// end would overshoot by as much again every period (and, with
	// pairings found within wallTolerance, swing the map from side to
	// side). One spread over a whole period left the map half its error
	// off for 50 ms: a map found 40 ns behind after an idle spell put
	// WallNow before [time.Now, time.Now] brackets in 67-85% of 20,000
	// (TestWallNowInsideTimeNowBrackets).
	pace := 1.0
	if pair[0] != 0 && clock > pair[0] {
		pace = float64(ref-pair[1]) / float64(clock-pair[0])
	}
	span := min(int64(wallPeriod), off*int64(2/wallMaxSlew))
	from, end := old.wallAt(at), at+span
	// Differences only: a wall time in Unix ns as a float64 is rounded
	// to 256 ns, which would quantise the slope to 2.56 ppm steps.
	rise := float64(ref-from) + float64(end-clock)*pace
	aim := wallSegment{at: at, wall: from, slope: wallSlope(rise / float64(span))}
	r.m.Store(old.with(aim, wallSegment{at: end, wall: aim.wallAt(end), slope: wallSlope(pace)}))
}

// rerated tells the map that the clock's readings run at another pace
// from the reading at on: the same counter at ratio times as many ns per
// count, or (ratio 0) another counter. The last pairing is what the next
// one measures the wall clock's pace from: moved onto the new pace's
// timeline (the counts it is before at, at the new rate), it measures
// that pace exactly; for another counter, whose pace against the last
// one's nothing here knows, it is dropped, and the pairing after the
// next one follows a period later, however idle the map is. Either way
// the map is paired again at the background goroutine's next look: a
// pace measured across a change of rate (535 ppm, cntfrq to refined,
// under qemu-aarch64, with the kernel's frequency at +500 ppm) had
// carried the map 230 µs off in 3 s at the idle pace. It says whether
// the map was read (and is now due).
func (r *pairedMap) rerated(at int64, ratio float64) bool {
	if r.due.IsZero() {
		return false // never read: no map to keep
	}
	r.repace = true
	if ratio > 0 && r.lastPair[0] != 0 && r.lastPair[0] < at {
		r.lastPair[0] = at - int64(float64(at-r.lastPair[0])*ratio)
	} else {
		r.lastPair = [2]int64{}
		r.paceNext = true
	}
	r.due = time.Now()
	r.asleep.Store(false)
	return true
}

// wallSlope is a segment's slope for a pace of the wall clock against
// the clock's readings, bounded to 1±wallMaxSlew.
func wallSlope(pace float64) int64 {
	return int64(math.Round((min(max(pace, 1-wallMaxSlew), 1+wallMaxSlew) - 1) * (1 << 32)))
}

// refClock reads a reference clock in ns: read for a full pairing (in
// the background), quick for a provisional one (a first caller waits on
// it).
type refClock struct {
	read, quick func() int64
}

// wallRef is the wall map's reference, CLOCK_REALTIME.
var wallRef = refClock{read: realWallNow, quick: quickWallNow}

// bubbleWall is the wall map's reference on a Clock that New made in a
// testing/synctest bubble on a caller's Source: the bubble's time.Now.
var bubbleWall = refClock{read: bubbleWallNow, quick: bubbleWallNow}

func bubbleWallNow() int64 { return time.Now().UnixNano() }

// pairedMap is the Clock's map of its readings onto one reference
// clock's: the wall clock for Time, the kernel's clocks for KernelTime.
type pairedMap struct {
	m   atomic.Pointer[wallMap]
	ref refClock // a test's fake reference replaces it before first use
	// monotone says the reference never steps back (the kernel's
	// monotonic and boot clocks): neither does the map.
	monotone bool
	due      time.Time // zero until the map is first read
	lastPair [2]int64  // the last pairing: clock, reference
	idle     int       // refreshes in a row that found the map unread
	// bracket is the last full pairing's bracket width; drift the most a
	// full pairing found the map off its reference (the map's error a
	// period after the pairing before).
	bracket, drift int64
	// used says the map was read since the last refresh (readers set
	// it, the refresher clears it); asleep that the refresher has slowed
	// to wallIdlePeriod, until a reader clears it and wakes the
	// goroutine; slow is the refresher's own record of the pace.
	used, asleep atomic.Bool
	slow         bool
	// provisional says the map's last segment is from a provisional
	// pairing (see aim).
	provisional bool
	// generation is the wallGeneration the map last looked at.
	generation uint64
	// paceNext says the clock moved to another counter (rerated): the
	// pairing after the next follows a period later. repace says the
	// readings' pace changed: the next pairing re-aims the map at the new
	// pace even where it finds the map on the wall clock (as it does
	// right after the change).
	paceNext, repace bool
	// first is the first version of the map, firstSeg its segment (see
	// aim).
	first    wallMap
	firstSeg [1]wallSegment
	// keep is the background goroutine's work on the map (tickLocked),
	// set at its first use: until a program maps a reading onto the wall
	// clock or a kernel clock, nothing links the maps' upkeep or their
	// references into it.
	keep func(c *Clock, r *pairedMap, now time.Time)
}
