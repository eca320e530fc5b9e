package schedclock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schedclock/schedclock/internal/adjtimex"
	"github.com/schedclock/schedclock/internal/clockbound"
	"github.com/schedclock/schedclock/internal/errata"
	"github.com/schedclock/schedclock/internal/kernel"
	"github.com/schedclock/schedclock/internal/measure"
	"github.com/schedclock/schedclock/internal/vmclock"
)

// Wall time with its error bound. A bounded reading is WallNow's time
// (the default clock's reading mapped onto CLOCK_REALTIME) widened by
// what bounds CLOCK_REALTIME's error here, plus the map's own error;
// or, where the hypervisor publishes the clock itself in a vmclock page
// for the counter this package reads, the page's time and bound. The
// sources, best first:
//
//   - vmclock (/dev/vmclock0): time and bound straight from the page's
//     formula, at a counter reading taken inside the page's seqcount;
//   - ClockBound's segment (/var/run/clockbound/shm0, protocol 2):
//     bound_nsec plus max_drift_ppb per second since as_of, as its
//     client computes it, free running after 5 s, nothing past
//     void_after, nothing while its disruption marker lags vmclock's;
//   - adjtimex: maxerror plus the kernel's own 500 µs a second, unknown
//     while the kernel says STA_UNSYNC.
//
// The read path is wait-free and makes no system call: the ClockBound
// and adjtimex figures are a snapshot (a bound as of a clock reading, and
// how fast it grows), which the first reader to find it a second old, or
// to find ClockBound's generation moved, refreshes while the others go on
// with the old one (still a valid bound: it only grows); the vmclock page
// is read at each call, in memory. Nothing is opened before the first
// call, and no goroutine or timer is started for it.
//
// A source that is torn, stale, truncated, of another layout or version,
// or garbage gives no bound: the reading falls to the next source, and
// says why the better ones were passed over (Info().WallBound).

// WallStatus says what a bounded reading of wall time is worth.
type WallStatus int

const (
	// WallUnknown: nothing bounds wall time now (no source, an
	// unsynchronised kernel, a disruption the sources have not caught up
	// with): Earliest and Latest are what the source states, not a bound
	// to rely on, and After and Before are false.
	WallUnknown WallStatus = iota
	// WallFreeRunning: the bound holds, but nothing is correcting the
	// clock any more: it grows with the source's drift.
	WallFreeRunning
	// WallSynchronized: the bound holds and a synchronisation daemon (or
	// the hypervisor) keeps it.
	WallSynchronized
)

func (s WallStatus) String() string {
	switch s {
	case WallUnknown:
		return "unknown"
	case WallFreeRunning:
		return "free-running"
	case WallSynchronized:
		return "synchronized"
	}
	return fmt.Sprintf("WallStatus(%d)", int(s))
}

// WallBound is a reading of wall time with its error bound: the true UTC
// time at the reading lies in [Earliest, Latest], as far as its Source
// says and its Status allows (TrueTime's TT.now()). It is a small value
// read through its methods (four words, which a call returns in
// registers and a caller keeps there: a struct of two time.Time is
// copied through memory, which cost the read path half as much again as
// WallNow here). The zero WallBound
// has no source and status WallUnknown.
type WallBound struct {
	earliest, latest int64 // Unix ns
	about            *wallAbout
	generation       uint64
}

// wallAbout is what a WallBound says besides its interval and
// generation: shared by the readings of one snapshot with one status.
type wallAbout struct {
	source, reason string
	status         WallStatus
}

// Earliest is the earliest the true time can be at the reading; it
// carries no monotonic reading.
func (b WallBound) Earliest() time.Time { return time.Unix(0, b.earliest) }

// Latest is the latest the true time can be at the reading; it carries
// no monotonic reading.
func (b WallBound) Latest() time.Time { return time.Unix(0, b.latest) }

// Status says what the bound is worth.
func (b WallBound) Status() WallStatus {
	if b.about == nil {
		return WallUnknown
	}
	return b.about.status
}

// Source is what bounded the reading: "vmclock", "clockbound",
// "adjtimex", or "none" (no source: Earliest and Latest are then the
// extremes time.Unix(0, ns) can say); "" for the zero WallBound.
func (b WallBound) Source() string {
	if b.about == nil {
		return ""
	}
	return b.about.source
}

// Reason says why Status is not WallSynchronized; "" when it is.
func (b WallBound) Reason() string {
	if b.about == nil {
		return ""
	}
	return b.about.reason
}

// Generation changes when the machine's time may have been disrupted (a
// live migration, a restore from a snapshot, a suspend, a stop by the
// hypervisor): what was derived from wall time before it, a cached
// lease or a clock offset, should be dropped. It changes at the first
// reading that sees vmclock's or ClockBound's marker change, and within
// a second of the other signals.
func (b WallBound) Generation() uint64 { return b.generation }

// After reports whether the reading is definitely after t: t is before
// Earliest. False when Status is WallUnknown.
func (b WallBound) After(t time.Time) bool {
	return b.Status() != WallUnknown && b.Earliest().After(t)
}

// Before reports whether the reading is definitely before t: t is after
// Latest. False when Status is WallUnknown.
func (b WallBound) Before(t time.Time) bool {
	return b.Status() != WallUnknown && b.Latest().Before(t)
}

// String writes the reading for people: the interval in UTC, its
// half-width, the source, the status and why, the generation.
func (b WallBound) String() string {
	text := "[" + b.Earliest().UTC().Format(time.RFC3339Nano) + ", " + b.Latest().UTC().Format(time.RFC3339Nano) + "] ±" +
		measure.Ns(float64(b.latest)/2-float64(b.earliest)/2) + " from " + b.Source() + ", " + b.Status().String()
	if r := b.Reason(); r != "" {
		text += ": " + r
	}
	return text + fmt.Sprintf(", generation %d", b.Generation())
}

// ErrNoWallBound is WaitUntilPast's error when nothing bounds wall time.
var ErrNoWallBound = errors.New("schedclock: no bound on wall time")

// BoundedWallNow returns WallNow's time with its error bound, from the
// best source this machine has (see WallBound). It is wait-free,
// allocates nothing and makes no system call, except the first call
// (which opens the sources: 0.1-0.5 ms on the development machine) and
// a refresh of the sources' snapshot: about once a second while it is
// called, more often while the clock is being paired with the wall clock again or the
// kernel's pace changes (adjtimex(2) and a few clock reads, some ten
// system calls, by whichever caller finds the snapshot due, the others
// not waiting for it). docs/wall-bound.md has the sources and the
// arithmetic.
func BoundedWallNow() WallBound { return defaultBounder.now() }

// WaitUntilPast returns once t is definitely past: BoundedWallNow().After(t)
// (TrueTime's commit-wait). It sleeps on timers for what remains of the
// bound, never spinning; it returns ctx's error if ctx ends first (a nil
// ctx never does), and an error wrapping ErrNoWallBound, with the
// reason, if a reading has no bound (Status WallUnknown). In a
// testing/synctest bubble the timers are the bubble's fake time while
// the bound is on the real clock: do not call it there.
func WaitUntilPast(ctx context.Context, t time.Time) error {
	return waitUntilPast(ctx, t, BoundedWallNow)
}

// waitUntilPast is WaitUntilPast on the readings of now.
func waitUntilPast(ctx context.Context, t time.Time, now func() WallBound) error {
	var done <-chan struct{}
	if ctx != nil {
		done = ctx.Done()
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		b := now()
		switch {
		case b.Status() == WallUnknown:
			return fmt.Errorf("%w: %s", ErrNoWallBound, b.Reason())
		case b.After(t):
			return nil
		}
		if ctx != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		// Earliest moves with the wall clock, less the bound's growth
		// (500 ppm at most for adjtimex): a thousandth more and a
		// microsecond, so that one more look usually finds t past.
		left := t.Sub(b.Earliest())
		left += left/1000 + time.Microsecond
		if timer == nil {
			timer = time.NewTimer(left)
		} else {
			timer.Reset(left)
		}
		select {
		case <-done:
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// The bound's timing, in the clock's nanoseconds.
const (
	// wallBoundRefresh is how old a snapshot of the sources may get
	// before a reader refreshes it.
	wallBoundRefresh = int64(time.Second)
	// clockBoundRetry is how often a missing or broken ClockBound segment
	// is looked for again (the daemon may start after this process, or
	// rewrite its file).
	clockBoundRetry = int64(10 * time.Second)
	// wallPaceMarginPPM is how far the clock's pace may be from
	// CLOCK_MONOTONIC's and from the kernel's seconds: their slew is 500
	// ppm at most. Every age measured on the clock is stretched by it
	// where that widens a bound, shrunk where that ends a status sooner.
	wallPaceMarginPPM = 1000
	// wallBoundRetryLive is how soon a snapshot taken while the clock's
	// writer held its lock is taken again.
	wallBoundRetryLive = int64(time.Millisecond)
	// wallUnpacedPPB is how fast the wall map's error may grow before the
	// map has measured the wall clock's pace: its slope limit
	// (wallMaxSlew) and the kernel's largest slew (500 ppm).
	wallUnpacedPPB = int64(wallMaxSlew*1e9) + 500_000
	// bootJumpSlackNs is how much CLOCK_BOOTTIME − CLOCK_MONOTONIC may
	// seem to grow without a suspend: the two clocks' rounding.
	bootJumpSlackNs = int64(time.Microsecond)
	// pvclockGuestStopped is PVCLOCK_GUEST_STOPPED: the host stopped the
	// guest (the guest's watchdog clears it, so it is seen only
	// sometimes).
	pvclockGuestStopped = 1 << 1
)

// wallGeneration numbers the disruptions of the machine's time that
// BoundedWallNow has seen (each new generation takes the next number);
// the wall and kernel maps pair again when it changes
// (pairedMap.dueLocked).
var wallGeneration atomic.Uint64

// wallDescribe is Info.WallBound's text for a clock, set at the first
// BoundedWallNow: until then nothing of this file is linked into a
// program that only reads Now.
var wallDescribe atomic.Pointer[func(c *Clock) string]

// wallBoundInfo is Info.WallBound for c: the default clock's bound, or
// that it was not read yet; "" for another clock.
func wallBoundInfo(c *Clock) string {
	if d := wallDescribe.Load(); d != nil {
		return (*d)(c)
	}
	if c.st.policy == nil {
		return ""
	}
	return "not read yet (at the first BoundedWallNow)"
}

var defaultBounder wallBounder

// wallBounder bounds the wall time of one clock's readings (the default
// clock's; a test's). Readers load state and marks; the refresher, one at
// a time (refreshing), replaces state, keeping what it needs between
// refreshes in the fields after refreshing.
type wallBounder struct {
	c     *Clock
	src   *wallSources
	once  sync.Once
	state atomic.Pointer[wallState]
	// marks is the generation and the markers it was given for: a
	// reader that sees a marker other than its own takes the next
	// generation for it (markGeneration), so that every reader that sees
	// that marker gives the same generation, without waiting for a
	// refresh.
	marks atomic.Pointer[wallMarks]

	refreshing atomic.Bool
	vm         *vmclock.Page // nil where there is none
	vmWhy      string
	counter    func() uint64 // the counter the page's counter_id must name; nil: none
	counterID  uint8
	counterWhy string
	cb         *clockbound.Segment
	cbSnap     clockbound.Snapshot
	cbHave     bool // cbSnap holds a consistent copy
	// vmBaselined and cbBaselined say the markers' first reading is in
	// marks (what the later ones are compared with).
	vmBaselined, cbBaselined bool
	cbWhy                    string
	cbRetryAt                int64
	last                     wallSignals
	seen                     bool // last holds a look
	// disruption is the last disruption seen, and what each source must
	// show to be trusted again.
	disruption wallDisruption
	mapSeen    wallMapSeen // the last measurement of the wall map
	// lastSlew is the kernel's slew at the last snapshot, swing how much
	// it has been seen to change (see paceSwing).
	lastSlew, swing int64
	slewSeen        bool
	// onPage says the clock ran on a paravirtual page at the last
	// snapshot: the next looks at the page's flags.
	onPage bool
}

// wallSources is how a wallBounder reaches its sources: the real ones
// (realWallSources) or a test's.
type wallSources struct {
	openVM    func() (*vmclock.Page, error)
	openCB    func() (*clockbound.Segment, error)
	adjtimex  func() (adjtimex.Reading, error)
	counter   func() (read func() uint64, id uint8, why string)
	realtime  func() int64         // CLOCK_REALTIME
	monotonic func() (int64, bool) // CLOCK_MONOTONIC
	boottime  func() (int64, bool) // CLOCK_BOOTTIME
	// pages reads the paravirtual page's signals; onPage says the clock
	// runs on the page (so that the page is mapped).
	pages func(onPage bool) (stopped, invalid, ok bool)
}

// wallMarks is a generation and the markers it stands for.
type wallMarks struct {
	vmMarker, vmGeneration, cbMarker uint64
	generation                       uint64
	why                              string // what the last change was
}

// wallSignals is the refresher's look at the signals of a disruption
// that the read path does not see.
type wallSignals struct {
	pagesOK       bool
	stopped       bool // PVCLOCK_GUEST_STOPPED
	invalid       bool // Hyper-V page sequence 0
	bootOK        bool
	bootLo, boots int64 // CLOCK_BOOTTIME − CLOCK_MONOTONIC within [bootLo, bootLo+boots]
}

// wallDisruption is the last disruption seen: at the clock reading at,
// when CLOCK_MONOTONIC read at most mono; adjtimex is trusted again once
// a reading after it shows the values set again (adjBase is the first
// reading after it, adjOK that a later one showed them set), ClockBound
// once its as_of is after mono.
type wallDisruption struct {
	why     string
	at      int64
	mono    int64
	adjBase adjtimex.Reading
	adjAt   int64
	adjHave bool
	adjOK   bool
}

// Which marker a reading saw change since its snapshot.
const (
	markNone = iota
	markVMMarker
	markVMGeneration
	markCBMarker
	markBusy // the page could not be read: a change cannot be ruled out
	markKinds
)

// markReasons say why a reading's fallback is unknown, by what it saw.
var markReasons = [markKinds]string{
	markVMMarker:     "vmclock's disruption_marker changed (a live migration); the sources are being read again",
	markVMGeneration: "vmclock's vm_generation_counter changed (a restore from a snapshot); the sources are being read again",
	markCBMarker:     "ClockBound's disruption marker changed; the sources are being read again",
	markBusy:         "the vmclock page was being written for every try: a disruption cannot be ruled out",
}

// wallState is one snapshot: the bound of the fallback source (ClockBound
// or adjtimex) as of a clock reading and how it grows, and what the read
// path checks each call (the vmclock page, ClockBound's generation).
type wallState struct {
	source    string
	unbounded bool // no source: no bound at all
	plain     bool // neither page to look at, and a bound: now's fast path
	// growthMul is ratePPB·2^32/1e9, rounded up: the growth as a 32.32
	// fixed-point multiplier of the age, for now's fast path.
	growthMul  uint64
	status     WallStatus
	reason     string
	at         int64 // the clock reading the bound is as of
	boundNs    int64 // the source's bound at at, the map's error included
	ratePPB    int64 // its growth per second of age
	freeAt     int64 // from this reading on, free running (freeReason)
	voidAt     int64 // from this reading on, unknown (voidReason)
	freeReason string
	voidReason string
	refreshAt  int64
	// The source, status and reason of each reading the snapshot can
	// give, by the fallback's status, and by what a reading saw change.
	about, freeAbout, voidAbout, vmAbout, vmFreeAbout wallAbout
	marked                                            [markKinds]wallAbout

	// latchSeq is the clock's latch sequence when the map's error was
	// measured, with the clock's writer lock held; live says it was (the
	// lock was free, the clock not suspended). A reading that finds
	// another sequence (a line published since: a switch, whose freezer
	// stands Now still while it lasts) or a snapshot not live takes its
	// wall time from CLOCK_REALTIME itself, not from a reading of the
	// clock that may stand still behind it.
	latchSeq uint64
	live     bool
	// mapVersion is the wall map's version the error was measured on: a
	// reading that finds another (a new segment, a step) takes a new
	// snapshot, and a snapshot whose map has a segment still to start
	// is taken again as it starts.
	mapVersion *wallMap
	mapStart   int64 // the clock reading where its next segment starts

	marks       *wallMarks // the generation the snapshot was taken under
	vm          *vmclock.Page
	vmTime      bool // the page may give the time: its counter is the one read here
	vmCounter   func() uint64
	vmCounterID uint8

	cb           *clockbound.Segment
	cbGeneration uint16

	skipped string // why the better sources were passed over
}

// now is BoundedWallNow on b.
func (b *wallBounder) now() WallBound {
	s := b.state.Load()
	if s == nil {
		s = b.start()
	}
	ns := int64(b.c.Now())
	age := ns - s.at
	if !s.plain || ns >= s.refreshAt || age < 0 || b.c.latch.seq.Load() != s.latchSeq || b.c.st.wall.m.Load() != s.mapVersion {
		return b.look(s, ns)
	}
	// The fallback source alone, no page to look at, the snapshot fresh
	// (its status holds until refreshAt, its age is below a second):
	// WallNow's time widened by the bound grown to ns, the growth a
	// fixed-point multiply (the read path's cost is its latency: the
	// next Now's LFENCE waits for all of it).
	half := s.boundNs + int64((uint64(age)*s.growthMul+1<<32-1)>>32)
	wall := wallNanos(b.c, ns)
	return WallBound{subSat(wall, half), addSat(wall, half), &s.about, s.marks.generation}
}

// look is now where there are pages to look at, or the snapshot is due
// for a refresh: the pages first (the vmclock page's time, and the
// markers of both), then, if the snapshot is due or a marker moved, a
// refresh unless another reader is doing it.
func (b *wallBounder) look(s *wallState, ns int64) WallBound {
	for tries := 0; ; tries++ {
		var vm vmclock.Reading
		vmOK, mark := false, markNone
		marks := s.marks
		if s.vm != nil {
			vm, vmOK, mark, marks = b.lookVM(s, marks)
		}
		moved := false
		if s.cb != nil && mark == markNone {
			mark, marks, moved = b.lookCB(s, marks)
		}
		live := s.live && b.c.latch.seq.Load() == s.latchSeq
		remapped := b.c.st.wall.m.Load() != s.mapVersion
		if (ns >= s.refreshAt || moved || !live || remapped || marks.generation != s.marks.generation) && tries == 0 {
			if fresh := b.tryRefresh(); fresh != nil {
				s, ns = fresh, int64(b.c.Now())
				continue
			}
		}
		if vmOK {
			about := &s.vmAbout
			if vm.Status == vmclock.StatusFreeRunning {
				about = &s.vmFreeAbout
			}
			half := int64(vm.MaxErrorNs)
			return WallBound{vm.UnixNano - half, addSat(vm.UnixNano, half), about, marks.generation}
		}
		var r WallBound
		if live {
			r = s.fallback(b.c, ns, wallNanos(b.c, ns))
		} else {
			r = s.fallback(b.c, ns, b.src.realtime())
		}
		r.generation = marks.generation
		if mark != markNone && r.about.status != WallUnknown {
			r.about = &s.marked[mark]
		}
		return r
	}
}

// lookVM reads the vmclock page: its time, where it gives one here, and
// its markers, resolved to their generation.
func (b *wallBounder) lookVM(s *wallState, marks *wallMarks) (r vmclock.Reading, ok bool, mark int, _ *wallMarks) {
	var marker, gen uint64
	if s.vmTime {
		snap, count, err := s.vm.Read(s.vmCounter)
		if err != nil {
			return r, false, markBusy, marks
		}
		marker, gen = snap.DisruptionMarker, snap.VMGeneration
		r, err = snap.TimeAt(count, s.vmCounterID)
		ok = err == nil
	} else {
		var err error
		if marker, gen, err = s.vm.Markers(); err != nil {
			return r, false, markBusy, marks
		}
	}
	switch {
	case marker != marks.vmMarker:
		mark = markVMMarker
	case gen != marks.vmGeneration:
		mark = markVMGeneration
	default:
		return r, ok, markNone, marks
	}
	m := *marks
	m.vmMarker, m.vmGeneration = marker, gen
	return r, ok, mark, b.markGeneration(marks, &m, markReasons[mark])
}

// lookCB looks at ClockBound's generation and, if the daemon wrote since
// the snapshot (moved: the snapshot is due), at its marker, resolved to
// its generation.
func (b *wallBounder) lookCB(s *wallState, marks *wallMarks) (mark int, _ *wallMarks, moved bool) {
	if g, err := s.cb.Generation(); err == nil && g == s.cbGeneration {
		return markNone, marks, false
	}
	snap, err := s.cb.Read()
	if err != nil || snap.DisruptionMarker == marks.cbMarker {
		return markNone, marks, true
	}
	m := *marks
	m.cbMarker = snap.DisruptionMarker
	return markCBMarker, b.markGeneration(marks, &m, markReasons[markCBMarker]), true
}

// markGeneration gives the markers of want a generation of their own,
// unless another reader (or the refresher) has given them one since old
// (the marks the caller compared with): the generation they were given.
// Lock-free: a failed swap means another caller moved the marks on.
// Two callers that read the page either side of a second change can
// swap the marks back and forth once each: a generation more than there
// were disruptions, never one less.
func (b *wallBounder) markGeneration(old, want *wallMarks, why string) *wallMarks {
	for {
		cur := b.marks.Load()
		if cur != old && cur.vmMarker == want.vmMarker && cur.vmGeneration == want.vmGeneration && cur.cbMarker == want.cbMarker {
			return cur
		}
		next := *want
		next.generation, next.why = wallGeneration.Add(1), why
		if b.marks.CompareAndSwap(cur, &next) {
			b.c.kick() // the clock's maps pair again (pairedMap.dueLocked)
			return &next
		}
	}
}

// newGeneration starts a generation for a disruption the markers do not
// show.
func (b *wallBounder) newGeneration(why string) *wallMarks {
	for {
		cur := b.marks.Load()
		next := *cur
		next.generation, next.why = wallGeneration.Add(1), why
		if b.marks.CompareAndSwap(cur, &next) {
			b.c.kick()
			return &next
		}
	}
}

// baseline records markers seen for the first time (a page or a segment
// just opened, or read for the first time): what later looks compare
// with, under the same generation.
func (b *wallBounder) baseline(set func(m *wallMarks)) *wallMarks {
	for {
		cur := b.marks.Load()
		next := *cur
		set(&next)
		if next == *cur || b.marks.CompareAndSwap(cur, &next) {
			return b.marks.Load()
		}
	}
}

// fallback is the fallback source's bounded reading at the clock reading
// ns, whose wall time is wall: widened by the snapshot's bound grown to
// ns.
func (s *wallState) fallback(c *Clock, ns, wall int64) WallBound {
	about := s.statusAt(ns)
	if s.unbounded {
		return WallBound{math.MinInt64, math.MaxInt64, about, s.marks.generation}
	}
	half := s.halfWidth(ns)
	return WallBound{subSat(wall, half), addSat(wall, half), about, s.marks.generation}
}

// wallNanos is c.WallTime(Instant(ns)) in Unix ns, without the
// time.Time between.
func wallNanos(c *Clock, ns int64) int64 {
	if mc := c.st.exact.manual.Load(); mc != nil {
		return mc.wallAt(ns)
	}
	if o := c.st.exact.wallOrigin.Load(); o != nil {
		return addSat(*o, ns)
	}
	return c.mapAt(&c.st.wall, ns)
}

// halfWidth is the fallback source's bound at the clock reading ns.
func (s *wallState) halfWidth(ns int64) int64 {
	if s.unbounded {
		return math.MaxInt64
	}
	return addSat(s.boundNs, adjtimex.GrowthNs(abs(ns-s.at), s.ratePPB))
}

// statusAt is the fallback source's status at the clock reading ns.
func (s *wallState) statusAt(ns int64) *wallAbout {
	switch {
	case s.status == WallUnknown:
		return &s.about
	case ns >= s.voidAt:
		return &s.voidAbout
	case ns >= s.freeAt && s.status == WallSynchronized:
		return &s.freeAbout
	}
	return &s.about
}

// tryRefresh refreshes the snapshot unless another reader is doing it:
// it returns the new one, or nil.
func (b *wallBounder) tryRefresh() *wallState {
	if !b.refreshing.CompareAndSwap(false, true) {
		return nil
	}
	defer b.refreshing.Store(false)
	s := b.refreshLocked()
	b.state.Store(s)
	return s
}

// start opens the sources and takes the first snapshot; callers that
// come meanwhile wait for it (their first call).
func (b *wallBounder) start() *wallState {
	b.once.Do(func() {
		if b.c == nil {
			b.c = defaultClock
		}
		if b.src == nil {
			b.src = realWallSources()
		}
		b.c.WallTime(b.c.Now()) // the wall map, before its error is measured
		b.refreshing.Store(true)
		if page, err := b.src.openVM(); err != nil {
			b.vmWhy = err.Error()
		} else {
			b.vm = page
			b.counter, b.counterID, b.counterWhy = b.src.counter()
		}
		b.marks.Store(&wallMarks{generation: wallGeneration.Load()})
		b.state.Store(b.refreshLocked())
		b.refreshing.Store(false)
		if b == &defaultBounder {
			describe := func(c *Clock) string {
				if c != b.c {
					return ""
				}
				return b.describe()
			}
			wallDescribe.Store(&describe)
		}
	})
	return b.state.Load()
}

// refreshLocked takes a new snapshot of the sources: the signals of a
// disruption first (the markers, resolved as the readers resolve them,
// and the ones only it looks at), then ClockBound's segment, then
// adjtimex; the best that gives a bound is the fallback the read path
// uses where vmclock gives no time.
func (b *wallBounder) refreshLocked() *wallState {
	at := int64(b.c.Now())
	mono, monoOK := b.src.monotonic() // read after at: at least the reading's CLOCK_MONOTONIC
	marks := b.refreshMarks()
	sig := b.signals()
	if why := b.disrupted(sig); why != "" {
		marks = b.newGeneration(why)
	}
	b.last, b.seen = sig, true
	if prev := b.state.Load(); prev != nil && marks.generation != prev.marks.generation {
		b.disruption = wallDisruption{why: marks.why, at: at, mono: mono}
	}

	s := &wallState{at: at, marks: marks, refreshAt: at + wallBoundRefresh, freeAt: math.MaxInt64, voidAt: math.MaxInt64, mapStart: math.MaxInt64, vm: b.vm}
	var skipped []string
	if b.vm == nil {
		skipped = append(skipped, named("vmclock", b.vmWhy))
	} else {
		s.vmCounter, s.vmCounterID = b.counter, b.counterID
		h := b.vm.Header()
		switch {
		case b.counter == nil:
			skipped = append(skipped, "vmclock for its markers only: "+b.counterWhy)
		case h.CounterID != b.counterID:
			skipped = append(skipped, fmt.Sprintf("vmclock for its markers only: its counter_id is %d, this CPU's counter %d", h.CounterID, b.counterID))
		default:
			s.vmTime = true
			if snap, count, err := b.vm.Read(b.counter); err != nil {
				skipped = append(skipped, "vmclock gives no time now: "+err.Error())
			} else if _, err := snap.TimeAt(count, b.counterID); err != nil {
				skipped = append(skipped, "vmclock gives no time now: "+err.Error())
			}
		}
	}

	adj, adjErr := b.src.adjtimex()
	mapErr, mapRate := b.mapErrorNs(s)
	if swing := b.paceSwing(adj, adjErr); swing != 0 {
		// A daemon is changing the pace: look more often.
		mapRate += swing
		s.refreshAt = min(s.refreshAt, at+int64(wallPeriod))
	}
	if ok, why := b.clockBound(s, at, mono, monoOK, marks); !ok {
		skipped = append(skipped, named("clockbound", why))
		b.adjtimex(s, at, adj, adjErr)
	}
	if !s.unbounded {
		s.boundNs, s.ratePPB = addSat(s.boundNs, mapErr), s.ratePPB+mapRate
	}
	// A status that ends before the next refresh ends it, and so does a
	// segment of the map that starts: the reader that finds it ended
	// looks at the sources again.
	for _, end := range [...]int64{s.voidAt, s.freeAt, s.mapStart} {
		if end > at {
			s.refreshAt = min(s.refreshAt, end)
		}
	}
	s.skipped = joinSemicolons(skipped)
	s.about = wallAbout{s.source, s.reason, s.status}
	s.freeAbout = wallAbout{s.source, s.freeReason, WallFreeRunning}
	s.voidAbout = wallAbout{s.source, s.voidReason, WallUnknown}
	s.vmAbout = wallAbout{"vmclock", "", WallSynchronized}
	s.vmFreeAbout = wallAbout{"vmclock", "the hypervisor says its clock is free running", WallFreeRunning}
	for kind := markVMMarker; kind < markKinds; kind++ {
		s.marked[kind] = wallAbout{s.source, markReasons[kind], WallUnknown}
	}
	s.growthMul = (uint64(max(s.ratePPB, 0))<<32 + 1e9 - 1) / 1e9
	// The fast path's arithmetic holds for ages below 2^30 ns (the
	// snapshot is refreshed after a second) and multipliers below 2^30.
	if !s.live {
		// The writer lock was taken (a switch may be under way, its
		// freezer standing Now still) or the clock is suspended: look
		// again soon, and take the wall time from CLOCK_REALTIME till
		// then.
		s.refreshAt = min(s.refreshAt, at+wallBoundRetryLive)
	}
	s.plain = s.vm == nil && s.cb == nil && !s.unbounded && s.live && s.growthMul < 1<<30 && s.refreshAt-s.at < 1<<30
	return s
}

// refreshMarks reads the markers the read path reads, and resolves them
// to their generation as a reader would; markers read for the first
// time are the baseline, not a change.
func (b *wallBounder) refreshMarks() *wallMarks {
	if b.vm != nil && !b.vmBaselined {
		if marker, gen, err := b.vm.Markers(); err == nil {
			b.baseline(func(m *wallMarks) { m.vmMarker, m.vmGeneration = marker, gen })
			b.vmBaselined = true
		}
	}
	marks := b.marks.Load()
	want, why := *marks, ""
	if b.vm != nil && b.vmBaselined {
		if marker, gen, err := b.vm.Markers(); err == nil {
			switch {
			case marker != want.vmMarker:
				why = markReasons[markVMMarker]
			case gen != want.vmGeneration:
				why = markReasons[markVMGeneration]
			}
			want.vmMarker, want.vmGeneration = marker, gen
		}
	}
	if b.cb != nil && b.cbBaselined {
		if snap, err := b.cb.Read(); err == nil {
			if snap.DisruptionMarker != want.cbMarker && why == "" {
				why = markReasons[markCBMarker]
			}
			want.cbMarker = snap.DisruptionMarker
		}
	}
	if why == "" {
		return marks
	}
	return b.markGeneration(marks, &want, why)
}

// clockBound makes ClockBound's segment s's source if it gives a bound:
// the segment read anew (or, while the daemon writes it, the copy read
// before: its bound still holds, growing with the drift), then the
// client's rules at mono, a CLOCK_MONOTONIC reading taken after at.
func (b *wallBounder) clockBound(s *wallState, at, mono int64, monoOK bool, marks *wallMarks) (ok bool, why string) {
	if b.cb == nil && at >= b.cbRetryAt {
		b.cbRetryAt = at + clockBoundRetry
		g, err := b.src.openCB()
		if err != nil {
			b.cbWhy = err.Error()
		} else {
			b.cb, b.cbHave, b.cbBaselined = g, false, false
		}
	}
	if b.cb == nil {
		return false, b.cbWhy
	}
	switch snap, err := b.cb.Read(); {
	case err == nil:
		b.cbSnap, b.cbHave = snap, true
		if !b.cbBaselined {
			// A segment just opened (a daemon started, or restarted):
			// its marker is the baseline.
			marks = b.baseline(func(m *wallMarks) { m.cbMarker = snap.DisruptionMarker })
			s.marks, b.cbBaselined = marks, true
		}
	case errors.Is(err, clockbound.ErrBusy) && b.cbHave:
		// The copy read before: still a bound.
	default:
		b.cb, b.cbHave, b.cbWhy = nil, false, err.Error()
		b.cbRetryAt = at + clockBoundRetry
		return false, b.cbWhy
	}
	snap := b.cbSnap
	s.cb, s.cbGeneration = b.cb, snap.Generation
	if snap.DisruptionMarker != marks.cbMarker {
		// The daemon wrote a new marker since refreshMarks looked: a
		// generation the read path does not know, so that its next look
		// resolves the marker.
		s.cbGeneration--
	}
	if !monoOK {
		return false, "CLOCK_MONOTONIC cannot be read"
	}
	bound, status, err := snap.At(mono)
	switch {
	case err != nil:
		return false, err.Error()
	case snap.DisruptionSupport && b.vm == nil:
		return false, "the daemon checks disruptions against vmclock's marker, which this process cannot read (" + b.vmWhy + ")"
	case snap.DisruptionSupport && snap.DisruptionMarker != marks.vmMarker:
		return false, "the daemon has not caught up with vmclock's disruption marker"
	case b.disruption.why != "" && snap.AsOf <= b.disruption.mono:
		return false, "its bound predates the disruption (" + b.disruption.why + ")"
	}
	s.source, s.status, s.boundNs = "clockbound", WallSynchronized, bound
	s.ratePPB = int64(snap.MaxDriftPPB) + (int64(snap.MaxDriftPPB)*wallPaceMarginPPM+1e6-1)/1e6
	s.freeReason = "ClockBound has not updated its bound for 5 s"
	switch {
	case snap.Status == clockbound.StatusFreeRunning:
		s.status, s.reason = WallFreeRunning, "ClockBound says the clock is free running"
	case status == clockbound.StatusFreeRunning:
		s.status, s.reason = WallFreeRunning, s.freeReason
	}
	shrink := func(d int64) int64 { return d - (d*wallPaceMarginPPM+1e6-1)/1e6 }
	s.voidAt = at + max(shrink(snap.VoidAfter-mono), 0)
	s.voidReason = "ClockBound's bound is past void_after: the daemon stopped updating it"
	if grace := snap.AsOf + clockbound.GracePeriodNs - mono; grace > 0 {
		s.freeAt = at + shrink(grace)
	} else {
		s.freeAt = at
	}
	return true, ""
}

// adjtimex makes the kernel's own estimate s's source: maxerror plus its
// growth, unknown while the kernel counts the clock unsynchronised, and
// after a disruption until the daemon has set the values again; no
// source where adjtimex cannot be read.
func (b *wallBounder) adjtimex(s *wallState, at int64, r adjtimex.Reading, err error) {
	if err != nil {
		s.source, s.unbounded, s.status, s.reason = "none", true, WallUnknown, "nothing bounds wall time here ("+err.Error()+")"
		return
	}
	rate := adjtimex.RatePPB(wallPaceMarginPPM)
	s.source, s.ratePPB, s.boundNs = "adjtimex", rate, r.BoundNs(0, rate)
	if err := r.Check(); err != nil {
		s.status, s.reason, s.boundNs = WallUnknown, err.Error(), max(s.boundNs, adjtimex.PhaseLimitUs*1000)
		return
	}
	if d := &b.disruption; d.why != "" && !d.adjOK {
		if !d.adjHave {
			d.adjBase, d.adjAt, d.adjHave = r, at, true
		} else if d.adjBase.SetSince(r, at-d.adjAt, wallPaceMarginPPM) {
			d.adjOK = true
		}
	}
	switch why := r.Unsynchronised(); {
	case why != "":
		s.status = WallUnknown
		s.reason = fmt.Sprintf("the kernel counts its clock unsynchronised (adjtimex: %s, maxerror %s)", why, measure.Ns(float64(r.MaxErrorUs)*1e3))
	case b.disruption.why != "" && !b.disruption.adjOK:
		s.status = WallUnknown
		s.reason = "the kernel's error estimate was not set again since a disruption (" + b.disruption.why + ")"
	default:
		s.status = WallSynchronized
		s.voidAt = at + r.AgeAtLimitNs(rate)
		s.voidReason = "the kernel's maxerror has grown past 16 s: it counts its clock unsynchronised"
	}
}

// signals looks at the signals of a disruption the read path does not
// see: the paravirtual page's flags, and CLOCK_BOOTTIME − CLOCK_MONOTONIC.
func (b *wallBounder) signals() (sig wallSignals) {
	if b.src.pages != nil {
		sig.stopped, sig.invalid, sig.pagesOK = b.src.pages(b.onPage)
	}
	if b.src.boottime != nil {
		sig.boots = math.MaxInt64
		for range 3 { // the narrowest of three brackets
			m1, ok1 := b.src.monotonic()
			boot, ok2 := b.src.boottime()
			m2, ok3 := b.src.monotonic()
			if ok1 && ok2 && ok3 && m2-m1 < sig.boots {
				sig.bootOK, sig.bootLo, sig.boots = true, boot-m2, m2-m1
			}
		}
	}
	return sig
}

// disrupted compares sig with the last look and says what disruption
// happened in between, or "".
func (b *wallBounder) disrupted(sig wallSignals) string {
	last := b.last
	switch {
	case !b.seen:
		return ""
	case sig.pagesOK && last.pagesOK && sig.stopped && !last.stopped:
		return "the pvclock page says the host stopped the guest (PVCLOCK_GUEST_STOPPED)"
	case sig.pagesOK && last.pagesOK && sig.invalid && !last.invalid:
		return "the Hyper-V TSC page was invalidated (sequence 0)"
	case sig.bootOK && last.bootOK && sig.bootLo > last.bootLo+last.boots+bootJumpSlackNs:
		return fmt.Sprintf("the machine was suspended (CLOCK_BOOTTIME − CLOCK_MONOTONIC grew by %s)", measure.Ns(float64(sig.bootLo-last.bootLo)))
	}
	return ""
}

// mapErrorNs is the wall map's error now, and how fast it may grow
// while the snapshot lives. The error: how far WallTime is from
// CLOCK_REALTIME read around the reading (the narrowest of three
// brackets, its width added), plus the map's own record (Info's
// KernelTime bound for the kernel's maps: the last pairing's bracket,
// the most a pairing found it off and how far that grows before a new
// segment corrects it). The growth: the most of how fast that offset
// moved since the last snapshot (its change over the time between, the
// two brackets' widths added) and how fast a pairing found the map
// drift in a period; with no snapshot a millisecond before to measure
// it from, the largest difference of pace the map and CLOCK_REALTIME
// can have (the map's slope limit and the kernel's slew: a map not yet
// paced against a clock the kernel slews), and a new snapshot 10 ms on.
// All of it with the clock's writer lock held, so that no switch is
// under way; s records the latch's sequence then, and whether the lock
// was free and the clock running (live).
func (b *wallBounder) mapErrorNs(s *wallState) (errNs, ratePPB int64) {
	if !b.c.st.mu.TryLock() {
		return 0, 0
	}
	defer b.c.st.mu.Unlock()
	s.latchSeq, s.live = b.c.latch.seq.Load(), !b.c.st.suspended
	b.onPage = slices.ContainsFunc(paravirtKinds, func(k paravirtKind) bool { return k.name == b.c.st.src.Name })
	width, off, at := int64(math.MaxInt64), int64(0), int64(0)
	for range 3 {
		r1 := b.src.realtime()
		t := b.c.Now()
		r2 := b.src.realtime()
		if r2-r1 < width {
			width, off, at = r2-r1, wallNanos(b.c, int64(t))-(r1+(r2-r1)/2), int64(t)
		}
	}
	width = max(width, 0)
	r := &b.c.st.wall
	if s.mapVersion = r.m.Load(); s.mapVersion != nil {
		// A segment that starts after now changes the map's error from
		// then on: measure it again there.
		for _, g := range s.mapVersion.segs[max(len(s.mapVersion.segs)-2, 0):] {
			if g.at > at {
				s.mapStart = min(s.mapStart, g.at+1)
			}
		}
	}
	prev := b.mapSeen
	b.mapSeen = wallMapSeen{at: at, off: off, width: width, ok: true}
	if b.c.notRealTime() {
		// A Manual or Bubble clock's wall time is exact: no map.
		return addSat(abs(off), width), 0
	}
	record := r.bracket/2 + r.drift + r.drift*int64(wallLead)/int64(wallPeriod)
	ratePPB = (r.drift*1e9 + int64(wallPeriod) - 1) / int64(wallPeriod)
	if span := at - prev.at; prev.ok && span >= int64(time.Millisecond) {
		moved := abs(off-prev.off) + width + prev.width
		ratePPB = max(ratePPB, (moved*1e9+span-1)/span)
	} else {
		ratePPB = wallUnpacedPPB
		s.mapStart = min(s.mapStart, at+int64(10*time.Millisecond))
	}
	return addSat(abs(off), width) + record, min(ratePPB, wallUnpacedPPB)
}

// paceSwing is how fast the wall map's error may grow from changes of
// CLOCK_REALTIME's pace it has not paired against yet, in ppb: the
// kernel's slew (tick and frequency) as adjtimex shows it changed since
// the last snapshot by that much, and a daemon that changed it may do
// so again (the swing seen halves at each snapshot that sees none); a
// phase being slewed in PLL mode moves at up to a quarter of it a
// second (SHIFT_PLL). A daemon that steers with the tick (chronyd)
// changes the pace by 100 ppm steps.
func (b *wallBounder) paceSwing(r adjtimex.Reading, err error) int64 {
	if err != nil {
		return 0
	}
	slew := r.SlewPPB()
	if b.slewSeen {
		b.swing = max(abs(slew-b.lastSlew), b.swing/2)
	}
	b.lastSlew, b.slewSeen = slew, true
	pll := int64(0)
	if r.Status&adjtimex.StaPLL != 0 && r.Offset != 0 {
		ns := abs(r.Offset)
		if r.Status&adjtimex.StaNano == 0 {
			ns *= 1000
		}
		pll = min(ns/4, int64(time.Second)) // ppb: ns a second over 1e9 ns
	}
	return b.swing + pll
}

// wallMapSeen is one measurement of the wall map against CLOCK_REALTIME:
// at the clock reading at, off from it, within a bracket of width.
type wallMapSeen struct {
	at, off, width int64
	ok             bool
}

// describe is Info.WallBound: the source, the bound now, the status and
// why, the generation, and why the better sources were passed over.
func (b *wallBounder) describe() string {
	s := b.state.Load()
	if s == nil {
		return "not read yet (at the first BoundedWallNow)"
	}
	ns := int64(b.c.Now())
	source, half, about := s.source, s.halfWidth(ns), s.statusAt(ns)
	if s.vmTime {
		if snap, count, err := s.vm.Read(s.vmCounter); err == nil {
			if r, err := snap.TimeAt(count, s.vmCounterID); err == nil {
				source, half, about = "vmclock", int64(r.MaxErrorNs), &s.vmAbout
				if r.Status == vmclock.StatusFreeRunning {
					about = &s.vmFreeAbout
				}
			}
		}
	}
	text := source
	if half != math.MaxInt64 {
		text += " ±" + measure.Ns(float64(half))
	}
	text += ", " + about.status.String()
	if about.reason != "" {
		text += ": " + about.reason
	}
	text += fmt.Sprintf("; generation %d", b.marks.Load().generation)
	if s.skipped != "" {
		text += "; " + s.skipped
	}
	return text
}

// named is why, said of the source name: prefixed with it unless it
// already is (the sources' errors are).
func named(name, why string) string {
	if len(why) > len(name) && why[:len(name)+1] == name+":" {
		return why
	}
	return name + ": " + why
}

func joinSemicolons(parts []string) string {
	text := ""
	for i, p := range parts {
		if i > 0 {
			text += "; "
		}
		text += p
	}
	return text
}

// realWallSources are the machine's: the device, the daemon's file,
// adjtimex, the kernel's clocks and the paravirtual page.
func realWallSources() *wallSources {
	src := &wallSources{
		openVM:   func() (*vmclock.Page, error) { return vmclock.Open(vmclock.DevicePath) },
		openCB:   func() (*clockbound.Segment, error) { return clockbound.Open(clockbound.DefaultPath) },
		adjtimex: adjtimex.Read,
		counter:  vmclockCounter,
		realtime: quickWallNow,
		monotonic: func() (int64, bool) {
			ns := monotonicReader.quick()
			return ns, ns != 0
		},
	}
	if runtime.GOOS == "linux" {
		src.boottime = func() (int64, bool) {
			ns := boottimeReader.quick()
			return ns, ns != 0
		}
		src.pages = func(onPage bool) (stopped, invalid, ok bool) {
			if !onPage {
				return false, false, false
			}
			return paravirtFlags()
		}
	}
	return src
}

// vmclockCounter is the counter a vmclock page's formula may be applied
// to here, read as the kernel's driver reads it: the TSC on amd64 unless
// the kernel marked it unstable (ptp_vmclock refuses then too), the
// virtual counter on arm64 with the erratum workaround this CPU needs.
func vmclockCounter() (read func() uint64, id uint8, why string) {
	if tsc := tscReader(); tsc != nil {
		v := kernel.TSCVerdict()
		if v.Known() && v.Current != "tsc" && !slices.Contains(v.Available, "tsc") {
			return nil, 0, "the kernel marked the TSC unstable (" + v.String() + ")"
		}
		return tsc, vmclock.CounterX86TSC, ""
	}
	if cntvctReader() != nil {
		if read := cntvctErratum(errata.Detect(os.DirFS("/")).Erratum); read != nil {
			return read, vmclock.CounterARMVCNT, ""
		}
		return cntvctReader(), vmclock.CounterARMVCNT, ""
	}
	return nil, 0, "this build reads neither the TSC nor the arm64 virtual counter"
}

// paravirtFlags reads the paravirtual clock page's signals of a stop:
// PVCLOCK_GUEST_STOPPED, a Hyper-V page marked invalid. Only where the
// clock runs on such a page: the page is found and mapped then (and the
// lookup is done).
func paravirtFlags() (stopped, invalid, ok bool) {
	p, err := foundParavirt()
	switch {
	case err != nil:
		return false, false, false
	case p.hv != nil:
		return false, p.hv.Load().Sequence == 0, true
	}
	return p.pv.Load().Flags&pvclockGuestStopped != 0, false, true
}
