package schedclock

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
	"weak"
)

// A Clock turns a free-running counter into monotonic nanoseconds. Now is
// wait-free and safe for any number of goroutines; Register, Update,
// Suspend, Resume and Close are serialised by the Clock.
//
// A Clock of your own is made by New. A nil *Clock is the default clock,
// as a nil Transport is http.DefaultTransport to an http.Client: each of
// its methods is the default clock's (Default), so that code which takes
// a *Clock reads the default clock when given none, and its tests give
// it another (package schedclocktest). So is a zero Clock. The writer
// methods too act on the default clock then, as its own do: Close is
// refused, and Register, Suspend and Resume are for the main package
// alone (see Suspend).
type Clock struct {
	// latch must stay the first field: its first 64 bytes (seq and bank 0)
	// must start on a 64-byte boundary. See latch.
	latch latch
	_     [128 - unsafe.Sizeof(latch{})]byte
	// coarse has a cache line of its own: it is written at every coarse
	// tick, and readers of Now must not see their line invalidated then.
	coarse coarseLine
	// st is the writer's side, apart: nothing a reader loads shares its
	// lines. It is nil in a zero Clock.
	st *clockState
	_  [clockSize - 128 - unsafe.Sizeof(coarseLine{}) - unsafe.Sizeof(&clockState{})]byte
}

// orDefault is the clock c's methods act on: the default clock for a
// nil *Clock or a zero Clock (see Clock), c itself otherwise.
func (c *Clock) orDefault() *Clock {
	if c == nil || c.st == nil {
		return defaultClock
	}
	return c
}

// clockSize is a Go size class that is a multiple of 64, and at most 512
// bytes (larger objects start after an 8-byte allocation header), so that
// every Clock, and so its latch, starts on a 64-byte boundary
// (TestLatchLayout checks it).
const clockSize = 256

// clockState is the writer's side of a Clock: the source and line it
// publishes, and each concern's own state.
type clockState struct {
	mu        sync.Mutex
	cur       line // what readers are given, as the writer knows it
	src       Source
	conv      conversion // src's conversion (cur.conv differs only while suspended)
	rate      rating     // src's rate, exactly as estimated, and where it came from
	suspended bool
	// held says the clock stands still, its line a constant, while the
	// watch waits for its reference's timeline to reach the value it
	// holds (see tracker.hold): no counter to fold.
	held bool
	// declared is the current Source's Rate as it was given (the "rate
	// wins" rule compares it; refinement changes src.Rate).
	declared uint64
	// info is the snapshot Info returns, taken as each writer unlocks, so
	// that Info never waits for a writer (or user code it calls).
	info atomic.Pointer[Info]

	// faults counts the panics of user code (a Read, a reference) that a
	// writer path recovered from (see faults.go).
	faults faultLog
	// fold is the refresh's schedule and what it found (see updateLocked).
	fold foldState
	// track calibrates and watches the counter against a reference; nil
	// for a clock without one. watch is what the watch found (see
	// calibrate.go).
	track *tracker
	watch watchLog
	// policy is the default clock's trust in its hardware counter; nil
	// for clocks made by New (see trust.go).
	policy *trustPolicy

	exact  exactState  // a counter that answers Coarse and Time exactly
	ticker tickerState // Coarse's ticking goroutine
	// wall is the wall map (wall.go).
	wall   pairedMap
	kernel kernelState // the maps onto the kernel's clocks (ktime.go)
	lines  lineLog     // the lines published before the current one
	loop   loopState   // the background goroutine
	writer writerState // who holds mu, and the hook between its steps
}

// exactState is what a clock on a counter that answers exactly (a
// Manual, a Bubble) keeps: Coarse and Time then need no ticker and no map.
type exactState struct {
	// manual is the Manual counter the clock runs on, if it does: Coarse
	// and Time then answer exactly from the counter (see manual.go).
	manual atomic.Pointer[manual]
	// wallOrigin, on a clock on a Bubble Source, is the wall time of its
	// reading 0: Time is that plus the reading, no map.
	wallOrigin atomic.Pointer[int64]
	// coarse says Coarse is Now (a Manual or Bubble counter: see
	// adoptExactLocked).
	coarse atomic.Bool
}

// tickerState is Coarse's ticking goroutine: every is Coarse's
// resolution; running says the goroutine runs (or is being started);
// wanted, set, asks the background goroutine to start it (with
// startTicker: until a program calls Coarse, nothing links the ticker
// into it); wg waits for it at Close.
type tickerState struct {
	every   time.Duration
	running atomic.Bool
	wanted  atomic.Pointer[func(clockRef, *clockState)]
	wg      sync.WaitGroup
}

// kernelState is the maps onto the kernel's clocks (see ktime.go).
type kernelState struct {
	maps kernelMaps
	// info describes the maps for Info, as of their last pairing.
	info string
	// tick keeps the maps fresh, from the first KernelTime on (nil
	// before: see useKernelMaps); on says it is set.
	tick func(c *Clock, now, next time.Time) time.Time
	on   atomic.Bool
}

// lineLog is what the writer keeps of the lines it published before the
// current one (publishLocked).
type lineLog struct {
	// live is the last line published that was not a freezer's.
	live line
	// since is the least reading the current line's counter values
	// extend back to exactly: the epoch of the first of the lines that
	// continued each other up to it. KernelTime's exact path inverts the
	// current line for readings from it on.
	since atomic.Int64
	// past is the line before it, for the readings taken on it.
	past atomic.Pointer[pastLine]
	// frozen is the last switch's freezer: the stand-in read function
	// of the line it froze, and that line's own, so that a reading
	// taken on the freezer's bank maps as one of the line it froze.
	frozen atomic.Pointer[frozenRead]
}

// frozenRead is a freezer's read function (stand) and the read function
// of the line it froze (of), as a bank holds them.
type frozenRead struct {
	stand, of unsafe.Pointer
}

// loopState is the background goroutine's: how often it woke (each is
// CPU an idle process pays), the channel that tells it to look again
// (its timer's, a writer's, Close's), and Close's. The goroutine waits
// on wake alone, and stop, closed before wake is sent to, says why it
// woke: a select over both would link the runtime's selectgo
// into every binary (see TestWeight). naps are the sleeps of
// sleepUnlessClosed, which Close cuts short.
type loopState struct {
	wakes   int
	wake    chan struct{}
	stop    chan struct{}
	stopped chan struct{}
	closed  bool
	naps    []*wakeTimer
}

// kick makes the background goroutine look at its schedule again.
func (l *loopState) kick() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// wait waits for a kick and reports whether the loop goes on: false once
// stop is closed, then without waiting.
func (l *loopState) wait() bool {
	if !l.stopping() {
		<-l.wake
	}
	return !l.stopping()
}

func (l *loopState) stopping() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

// writerState says who the writer is. g is the goroutine that holds mu,
// if it named itself (see lockAsWriter); 0 otherwise. userSrc and
// userRef say the source's Read and the reference are user code, which
// may call writer methods from inside the writer (see ownCode). step is
// called between the writer's steps; tests use it to stop the writer at
// each of them. It is a no-op otherwise.
type writerState struct {
	g                atomic.Uint64
	userSrc, userRef bool
	step             func(string)
}

// foldState is the refresh's schedule and what it found.
type foldState struct {
	due time.Time // when the background goroutine folds next
	// lastMono is the runtime's clock at the last fold, which measures
	// how late the next one is (see lateFold); lostWraps counts the wraps
	// of a narrow counter that a fold found lost.
	lastMono  int64
	lostWraps int
}

// watchLog is what the watch of a clock with a reference found.
type watchLog struct {
	reanchors    int
	lastReanchor string
	// reference says how the reference last misbehaved ("" if never).
	reference string
	// counterFaults counts the readings of the counter that a
	// re-anchoring refused as ones it cannot have produced;
	// lastCounterFault says the last: what, by how much, when.
	counterFaults    int
	lastCounterFault string
	// standStill is the lead of the last reading refused: how long the
	// clock stands (or stood) still for it, as its reference counts.
	standStill time.Duration
}

func noStep(string) {}

// verdictPeriod is how often the default clock asks whether the kernel
// still trusts its hardware counter.
const verdictPeriod = 5 * time.Second

// New returns a running Clock on src, reading near 0 ns now, with its
// background goroutine started (stop it with Close). It returns an error
// wrapping ErrInvalidSource if src is unusable: Read nil or panicking,
// Bits outside 1..64, Rate 0, a Rate too high for a 32-bit mult, or a
// counter that wraps so fast that the refresh goroutine could not be
// trusted to fold it in time (see Source); and an error that says which
// for a bad Option.
func New(src Source, opts ...Option) (*Clock, error) {
	var o options
	if err := o.apply(opts); err != nil {
		return nil, err
	}
	var tr *tracker
	if o.reference != nil {
		tr = &tracker{ref: o.reference, src: src, adopted: true}
	}
	c, err := newClock(src, rating{hz: float64(src.Rate), origin: rateDeclared}, tr)
	if err != nil {
		return nil, err
	}
	if o.coarseEvery != 0 {
		c.st.ticker.every = o.coarseEvery
	}
	if src.bubble == nil && !ownCode(src.Read) && inSynctestBubble() {
		// A caller's Source in a testing/synctest bubble reads the
		// bubble's clock (time.Since), as the code under test does: its
		// wall time is the bubble's too (see WallTime), and so is the
		// witness its reference is checked against (the runtime's clock
		// hardly moves while the bubble's hours pass: every reference
		// would read as one that jumps).
		c.st.wall.ref = bubbleWall
		if tr != nil {
			tr.witness = bubbleWallNow
		}
	}
	c.st.mu.Lock()
	c.unlock()
	c.start()
	// Dropped without Close, the clock stops its goroutines: they hold it
	// only weakly (see runBackground), and this wakes them.
	runtime.AddCleanup(c, stopUnreachable, c.st)
	return c, nil
}

// newClock returns a Clock on src, tracked by tr if not nil, with its
// first line published; start starts its background goroutine.
func newClock(src Source, rate rating, tr *tracker) (*Clock, error) {
	conv, err := newConversion(src)
	if err != nil {
		return nil, err
	}
	cyc, err := readOnce(src)
	if err != nil {
		return nil, err
	}
	c := &Clock{st: &clockState{
		src: src, conv: conv, rate: rate, track: tr, declared: src.Rate,
		loop:   loopState{wake: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})},
		ticker: tickerState{every: defaultCoarseResolution},
		writer: writerState{step: noStep, userSrc: !ownCode(src.Read), userRef: tr != nil && !ownCode(tr.ref)},
	}}
	if tr != nil {
		tr.restart = true
	}
	c.publishLocked(line{read: src.Read, conv: conv, epochCyc: cyc & conv.mask, epochTotal: cyc & conv.mask})
	c.adoptExactLocked(src)
	c.st.fold.due = time.Now().Add(conv.refreshPeriod())
	c.st.fold.lastMono = runtimeNano()
	in := c.infoLocked() // Info's snapshot exists before any writer runs
	c.st.info.Store(&in)
	return c, nil
}

func (c *Clock) start() { go runBackground(weakClock(c), c.st, 0) }

// clockRef is a weak reference to a Clock, made on its latch: the
// Clock's first field, at the Clock's own address, so that it holds the
// whole Clock as weakly. A weak.Pointer[Clock] would do the same, but
// its generic dictionary marks Clock as used in an interface, and with
// it every type its fields reach: time.Time's String and GoString then
// stay in every binary, and with them time's formatting and its time
// zone loader (see TestWeight).
type clockRef = weak.Pointer[latch]

// weakClock returns a weak reference to c.
func weakClock(c *Clock) clockRef { return weak.Make(&c.latch) }

// clockOf returns the Clock w refers to, nil once it was collected.
func clockOf(w clockRef) *Clock { return (*Clock)(unsafe.Pointer(w.Value())) }

// Update folds the counter into the clock's epoch: it moves the point the
// clock converts from (a counter value and the reading it stands for) up
// to now, so that the counter can wrap without time being lost. The
// clock's goroutine calls it every refresh period (Info.RefreshPeriod);
// calling it more often is harmless. It does not move time by even a
// nanosecond: the sub-nanosecond remainder is carried into the new epoch.
//
// Update does nothing while the clock is suspended, and returns
// ErrClosed after Close. A Read that panics leaves the clock as it was:
// the error wraps ErrFault and carries the panic's value.
func (c *Clock) Update() (err error) {
	c = c.orDefault()
	if locked, err := c.lockWriterUnless("Update", true); !locked {
		return err
	}
	defer c.unlock()
	return c.faultError("Update", c.guard("Update", c.updateLocked, nil))
}

// updateLocked folds the counter into the epoch. On a counter that wraps
// it also checks, with the runtime's monotonic clock, a fold that came
// late (see lateFold): a delta in the negative zone that the time elapsed
// since the last fold explains is forward progress, not a step back, and
// whole wraps that the masked delta cannot show are added back (at most
// 1/8 of a wrap of error remains from the runtime's clock and the
// counter's rate disagreeing, which a wrap of at least 667 ms makes
// impossible to mistake). Lost wraps are counted in Info.
func (c *Clock) updateLocked() {
	if c.st.held {
		return // a constant line: nothing to fold
	}
	cyc := c.st.cur.read()
	c.foldLocked(cyc, runtimeNano())
}

// foldLocked is updateLocked at a counter value cyc read when the
// runtime's clock read mono.
func (c *Clock) foldLocked(cyc uint64, mono int64) {
	next := c.st.cur
	delta := (cyc - c.st.cur.epochCyc) & c.st.cur.conv.mask
	clamped := clampDelta(delta, c.st.cur.conv.mask)
	var lost uint64
	saturated := false
	// A Manual's wraps are Advance's to fold (see Manual.foldAcross):
	// its counter follows no clock, so the runtime's says nothing of it.
	if c.st.cur.conv.wraps() && !c.st.suspended && c.st.exact.manual.Load() == nil {
		var forward bool
		if lost, forward = lateFold(c.st.cur, cyc, mono-c.st.fold.lastMono); forward {
			clamped = delta
		}
	}
	if lost > 0 {
		// The lost wraps are counts like the rest of the delta, converted
		// with it: the fold stays exact, remainder included.
		hi, lo := bits.Mul64(lost, c.st.cur.conv.mask+1)
		lo, carry := bits.Add64(lo, clamped, 0)
		clamped, saturated = lo, hi != 0 || carry != 0
		c.st.fold.lostWraps += int(lost)
	}
	next.epochNs, next.frac = c.st.cur.atDelta(clamped)
	if saturated { // more than 2^64 counts since the last fold
		next.epochNs, next.frac = math.MaxInt64, 0
	}
	next.epochCyc = cyc & c.st.cur.conv.mask
	next.epochTotal = c.st.cur.epochTotal + clamped
	c.publishLocked(next)
	c.st.fold.lastMono = mono
}

// lateFold reads a fold of ln's counter at cyc, elapsed runtime
// nanoseconds after the last fold, against the time elapsed: forward says
// that a delta in the negative zone (which readers clamp, taking it for a
// counter that stepped back) is forward progress, and lost is how many
// whole wraps the masked delta hides, rounded to the nearest. Both hold
// only when the delta plus the lost wraps account for elapsed to within
// 1/8 of a wrap; otherwise (a counter that stepped back, stopped, or is
// driven by hand) the fold is not second-guessed. A fold on time (a delta
// below the negative zone, less than a wrap elapsed) is not looked at.
func lateFold(ln line, cyc uint64, elapsed int64) (lost uint64, forward bool) {
	mask := ln.conv.mask
	delta := (cyc - ln.epochCyc) & mask
	negative := delta >= negativeFrom(mask)
	wrap := uint64(ln.conv.wrap())
	if elapsed <= 0 || !negative && uint64(elapsed) < wrap {
		return 0, false
	}
	seen, el := ln.conv.nanos(delta), uint64(elapsed)
	if seen >= el {
		// The counter counted more than elapsed: by less than 1/8 of a
		// wrap, a counter on time; by more, one that stepped back.
		return 0, negative && seen-el <= wrap/8
	}
	gap := el - seen
	lost = (gap + wrap/2) / wrap
	var residue uint64
	if whole := lost * wrap; whole >= gap {
		residue = whole - gap
	} else {
		residue = gap - whole
	}
	if residue > wrap/8 {
		return 0, false
	}
	return lost, negative
}

func (c *Clock) publishLocked(ln line) {
	// A switch's freezer line is the current line read through the
	// freezer: it neither starts a line nor ends one, and the line
	// published after it continues the one before it or not (a switch
	// to the same counter at the same rate continues it).
	if ln.frozen {
		c.st.lines.frozen.Store(&frozenRead{stand: funcPtr(ln.read), of: funcPtr(c.st.lines.live.read)})
	} else {
		if !c.st.lines.live.continuedBy(&ln) {
			// Before the publication: a reader of the new line sees them
			// (lines.past first: see exactKernelTime).
			if c.st.lines.live.read != nil {
				c.st.lines.past.Store(c.st.lines.live.past(c.st.lines.since.Load()))
			}
			c.st.lines.since.Store(ln.epochNs)
		}
		c.st.lines.live = ln
	}
	c.st.cur = ln
	c.latch.publish(&c.st.cur, c.st.writer.step)
}

// reratedLocked tells the clock's maps that its readings run at another
// pace from the current line's epoch on: old is the conversion of the
// counter it read before, if it is the same counter (a new rate, a
// re-anchoring), or nil (another counter). It has the background
// goroutine pair the maps at once.
func (c *Clock) reratedLocked(old *conversion) {
	ratio := 0.0
	if old != nil && old.mult != 0 {
		// ns per count, new over old
		ratio = float64(c.st.cur.conv.mult) / float64(old.mult) * math.Ldexp(1, int(old.shift)-int(c.st.cur.conv.shift))
	}
	mapped := c.st.wall.rerated(c.st.cur.epochNs, ratio)
	for i := range c.st.kernel.maps {
		mapped = c.st.kernel.maps[i].rerated(c.st.cur.epochNs, ratio) || mapped
	}
	if mapped {
		c.kick() // the writer may not be the background goroutine
	}
}

// continuedBy says next reads the same counter through the same
// conversion as ln and goes on from it exactly (a fold, a re-anchor
// without a step): ln's readings are next's, extended back, at the
// same counter values.
func (ln *line) continuedBy(next *line) bool {
	if ln.read == nil || funcPtr(ln.read) != funcPtr(next.read) || ln.conv != next.conv {
		return false
	}
	ns, frac := ln.at(next.epochCyc)
	return ns == next.epochNs && frac == next.frac
}

// Close stops the background goroutines and waits for them to exit. Now
// keeps answering (Coarse stands at its last value). A closed clock is no
// longer updated (Update): on a 64-bit counter it stays exact for 7/8 of
// the counter's range, 2^64*7/8 counts (511 years at 1 GHz, 51 years at
// 10 GHz), after which Now takes the counter for one that stepped back
// and stands at the value of the last Update; a narrower counter stays
// exact for 7/8 of one wrap. A clock on a schedclocktest Manual counter
// stands still instead, at its reading when Close took effect: Advance
// and Set no longer move it (nor fold a narrow one, whose unfolded wraps
// would read as a step back). After Close, Register, Update, Suspend and Resume
// return ErrClosed and change nothing, so a clock closed while suspended
// stays frozen, and so does one closed while it stands still after its
// watch refused a reading (see [Watch] Holding). A second Close returns ErrClosed. The default clock
// cannot be closed: its Close returns an error and changes nothing.
//
// A Clock made inside a testing/synctest bubble must be closed there, so
// that its goroutines leave the bubble before it ends.
func (c *Clock) Close() error {
	if c = c.orDefault(); c == defaultClock {
		return fmt.Errorf("%w: it is shared by every package of the process", errDefaultClock)
	}
	if !c.lockAsWriter() {
		return reentered("Close")
	}
	if c.stoppedLocked() {
		c.st.writer.g.Store(0)
		c.st.mu.Unlock()
		return ErrClosed
	}
	if c.st.exact.manual.Load() != nil && !c.st.suspended && !c.st.held {
		// A Manual counter moves only when a test says so, and Advance
		// no longer folds a closed clock: followed on, its next wrap
		// would read as a step back. It stands still instead, as
		// Manual's doc says, at a reading no reader has passed.
		frozen := c.st.cur
		_, frozen.epochNs, frozen.frac = c.freeze("close")
		c.publishLocked(frozenLine(frozen, c.st.conv))
	}
	c.st.loop.closed = true
	c.st.track = nil
	c.st.policy.closeLocked()
	close(c.st.loop.stop)
	c.st.loop.kick()
	for _, nap := range c.st.loop.naps {
		nap.Reset(0)
	}
	if c.st.policy.claimUnused() {
		close(c.st.loop.stopped) // no set-up ever started: nothing to wait for
	}
	c.unlock()
	<-c.st.loop.stopped
	c.st.ticker.wg.Wait()
	// No ticker clears Coarse's value any more, and the kernel's ticks
	// no longer refresh it: hold it at a reading taken now if the last
	// tick cleared it, so that it stands still.
	c.coarse.tick.Store(nil)
	atomic.StoreUint64(&c.coarse.seen, 0)
	atomic.CompareAndSwapInt64(&c.coarse.value, 0, min(c.nanos(), math.MaxInt64-1)+1)
	return nil
}

// stoppedLocked reports whether the clock takes no more changes.
func (c *Clock) stoppedLocked() bool { return c.st.loop.closed }

// kick makes the background goroutine look at its schedule again.
func (c *Clock) kick() { c.st.loop.kick() }

// background is the kernel's sched_clock_poll hrtimer and more: it folds
// the counter into the epoch every refresh period (see
// conversion.refreshPeriod), and, on a clock with a reference, calibrates
// and watches the counter (see calibrate.go). It runs on the goroutine
// that calls it (the default clock's parked one).
func (c *Clock) background() { runBackground(weakClock(c), c.st, 0) }

// runBackground is a clock's background goroutine. It holds the Clock
// only weakly, and strongly only during a tick, so that a Clock nothing
// else holds can be collected: then it exits (the cleanup New registers
// wakes it). A runtime.Goexit of user code in a tick (see goexit) ends
// the goroutine whatever it does: its deferred function starts another,
// which waits out the tick's backoff and goes on with the work; the
// goroutine count stays what it was. It first waits delay.
func runBackground(w clockRef, st *clockState, delay time.Duration) {
	exited := true
	defer func() {
		if exited {
			go runBackground(w, st, st.faults.retry)
			return
		}
		close(st.loop.stopped)
	}()
	// The timer kicks the loop, as a writer does: armed for what is left
	// of the delay, then by each tick. A firing that Reset could not stop
	// in time is one more look at the schedule.
	timer := time.AfterFunc(math.MaxInt64, st.loop.kick)
	defer timer.Stop()
	for until := time.Now().Add(delay); time.Now().Before(until); {
		timer.Reset(time.Until(until))
		if !st.loop.wait() {
			exited = false
			return
		}
	}
	for {
		startCoarse(w, st)
		next, ok := tickIfAlive(w, time.Now())
		if !ok {
			exited = false
			return
		}
		timer.Reset(time.Until(next))
		if !st.loop.wait() {
			exited = false
			return
		}
	}
}

// tickIfAlive ticks the Clock w points to, if it is still reachable: the
// only strong reference the background goroutine takes, dropped on
// return.
func tickIfAlive(w clockRef, now time.Time) (next time.Time, ok bool) {
	c := clockOf(w)
	if c == nil {
		return time.Time{}, false
	}
	return c.tick(now), true
}

// stopUnreachable is the cleanup of a Clock made by New that became
// unreachable without Close: it stops its goroutines as Close would
// (nothing can read the clock any more). A Clock made in a
// testing/synctest bubble must be closed there (its channels belong to
// the bubble, and closing one from the cleanup's goroutine panics: the
// recover keeps that from ending the process).
func stopUnreachable(st *clockState) {
	defer func() { _ = recover() }()
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.loop.closed {
		st.loop.closed = true
		close(st.loop.stop)
		st.loop.kick()
	}
}

// tick does what is due and returns when something is next due. A Read or
// reference that panics leaves the clock as it was (each step publishes
// only once it has read all it needs); the fault is counted in Info, and
// the work is tried again a watch period later, backing off while the
// faults go on, but never later than the refresh period.
func (c *Clock) tick(now time.Time) (next time.Time) {
	c.st.mu.Lock()
	if c.st.writer.userSrc || c.st.writer.userRef {
		// A user's Read or reference run below gets errReentered from a
		// writer method of this clock, instead of hanging this goroutine
		// (see lockAsWriter).
		c.nameWriterLocked()
	}
	defer c.unlock()
	c.st.faults.exiting = false
	c.st.loop.wakes++
	c.guard("background", func() { next = c.tickDueLocked(now) }, func(r any) {
		c.recordFaultLocked("background", r)
		c.st.faults.streak++
		c.st.faults.retry = min(watchPeriod<<min(c.st.faults.streak-1, 6), c.st.conv.refreshPeriod(), verdictPeriod)
		next = now.Add(c.st.faults.retry)
	})
	return next
}

// tickDueLocked is tick's work, run through guard.
func (c *Clock) tickDueLocked(now time.Time) (next time.Time) {
	if c.stoppedLocked() {
		return now.Add(time.Hour)
	}
	policyDue := c.followKernelLocked(now)
	if tr := c.st.track; tr != nil && !c.st.suspended {
		c.trackSafelyLocked(tr, now)
	}
	if !now.Before(c.st.fold.due) {
		if !c.st.suspended {
			c.updateLocked()
		}
		c.st.fold.due = now.Add(c.st.conv.refreshPeriod())
	}
	c.st.faults.streak = 0
	next = c.st.fold.due
	if r := &c.st.wall; r.keep != nil && r.dueLocked(now) {
		r.keep(c, r, now)
	}
	if !c.st.wall.due.IsZero() && c.st.wall.due.Before(next) {
		next = c.st.wall.due
	}
	if c.st.kernel.tick != nil {
		next = c.st.kernel.tick(c, now, next)
	}
	if !policyDue.IsZero() && policyDue.Before(next) {
		next = policyDue
	}
	if tr := c.st.track; tr != nil && !c.st.suspended && tr.nextDue().Before(next) {
		next = tr.nextDue()
	}
	return next
}

// unlock takes the snapshot Info returns and releases the writer lock.
func (c *Clock) unlock() {
	in := c.infoLocked()
	c.st.info.Store(&in)
	c.st.writer.g.Store(0) // before the lock is free: see lockAsWriter
	c.st.mu.Unlock()
}

// Info describes a Clock's configuration: what it runs on, at what rate
// and how exactly, and what its checks found.
type Info struct {
	Source string // the Source's Name
	Rate   uint64 // Hz
	// RateOrigin says where Rate came from: "declared" (Source.Rate as
	// given), "measured" (against CLOCK_MONOTONIC_RAW), "refined" (in the
	// background, against the clock's reference), or the register or
	// firmware that declared it ("cpuid", "cntfrq", "device tree", ...).
	RateOrigin    string
	RateErrorPPM  float64       // estimated error of Rate, ppm (0 when declared)
	Bits          int           // counter width
	Mult, Shift   uint32        // ns = cycles*Mult >> Shift
	RefreshPeriod time.Duration // how often the clock's goroutine calls Update
	Suspended     bool
	Closed        bool
	// ConversionErrorPPM is the conversion's own error: how far
	// Mult*2^-Shift ns per cycle is from 1e9/rate, in ppm (included in
	// RateErrorPPM).
	ConversionErrorPPM float64
	// Watch is what the watch of a clock with a reference found; zero on
	// a clock without one.
	Watch Watch
	// Faults counts the panics of user code (a Source's Read, a
	// reference) that a writer path or the background goroutine
	// recovered from; LastFault says the last one: where, what, when.
	Faults    int
	LastFault string
	// LostWraps counts the wraps of a narrow counter that the refresh
	// found lost and added back (see Source on when that can happen).
	LostWraps int
	// KernelTime says, for each kernel clock KernelTime maps to, how
	// closely the map follows it: "exact" where it is the kernel's own
	// conversion of the clock's counter (and which), and ±bound for the
	// paired map (the last pairing's bracket width and the most a
	// pairing found the map off), or why there is no map (not mapped
	// yet, not on this system, perf's clock not exported).
	KernelTime string
	// WallBound says, for the default clock, what bounds wall time here
	// (BoundedWallNow's source), the bound now, its status and why, the
	// generation, and why better sources were passed over; empty on
	// clocks made by New.
	WallBound string
	// Evidence is what the default clock decided its counter on; zero on
	// clocks made by New.
	Evidence Evidence
}

// Watch is what the watch of a clock with a reference (the default
// clock's CLOCK_MONOTONIC_RAW, WithReference's) found: how it re-anchored
// the clock, the counter's readings it refused, how the reference
// misbehaved, and how closely it pairs the two.
type Watch struct {
	// Reanchors counts how many times the watch re-anchored the clock on
	// the reference's timeline (its counter stepped back, jumped or
	// changed rate, or a stand-still ended); LastReanchor says why, the
	// last time.
	Reanchors    int
	LastReanchor string
	// CounterFaults counts the readings of the counter that the watch
	// refused as ones the counter cannot have produced: far ahead of
	// what the reference counted (more than twice its progress since the
	// last comparison, or more than the longest watch period, 2 s), such
	// as a jump of a migrated counter, a paravirtual page's delta that
	// wrapped or a value that would saturate the clock. Such a reading
	// is never followed: the counter's pace is. LastCounterFault says
	// the last: what, by how much, and when.
	//
	// Readers that read the counter before the watch saw it read what
	// it said (nothing above a Source can filter its values), and no
	// reading is ever below one already returned: the clock stands still
	// at the highest value a reader may have read until its reference's
	// timeline reaches it, and then goes on on that timeline at the
	// counter's rate. A refused jump costs that stand-still: as long as
	// the lead refused, at most, as the reference counts it (10 s for a
	// counter that jumped 10 s ahead), from the watch's refusal on. A
	// value that saturates the clock (math.MaxInt64) holds it there for
	// good, and a lead of centuries (a wrapped delta) for centuries:
	// only the Source can keep such values from readers (the paravirtual
	// page does).
	CounterFaults    int
	LastCounterFault string
	// Holding says the clock stands still now, after a refused reading;
	// StandStill is the last stand-still's length: the lead refused, as
	// the reference counts it (the clock goes on once the reference has
	// counted it, at the background goroutine's next look).
	Holding    bool
	StandStill time.Duration
	// Reference says how the clock's reference last misbehaved (stuck,
	// stepped back, jumped, or ran at an impossible rate against the
	// runtime's monotonic clock), and when; such a reference is not
	// followed until it agrees again. Empty while it never did.
	Reference string
	// Bracket is the narrowest (Now, reference, Now) bracket the watch
	// has taken: the width within which each comparison pairs the
	// clock with its reference (the default clock reads
	// CLOCK_MONOTONIC_RAW through the vDSO, where the system call
	// widened it to microseconds). Zero on a clock without a reference.
	Bracket time.Duration
}

// Evidence is the default clock's evidence for the counter it runs on
// (Info.Evidence): the hardware counter is used only when the kernel runs
// on it, or when the cross-CPU check ran and found no warp, and, where
// the counter has evidence of its own (a paravirtual page), while that
// holds.
type Evidence struct {
	// Rejected says why the default clock does not run on the hardware
	// counter; it is empty when it does.
	Rejected string
	// CrossCPU says what the default clock's cross-CPU check of its
	// hardware counter found (the kernel's check_tsc_warp): no warp, a
	// warp (which CPUs, how large), or why it could not run (one allowed
	// CPU, affinity not settable, not Linux).
	CrossCPU string
	// CounterCheck says what the default clock's check of the counter's
	// own evidence found: on arm64 (and the other time bases) which
	// counter erratum it works around and what a read costs against the
	// portable source (a counter the kernel traps is slower); on a
	// paravirtual clock, the page (where, its version and flags), read
	// again with every verdict.
	CounterCheck string
	// Kernel is the kernel's verdict on the hardware counter as the
	// default clock read it: the kernel's clocksource, or why it is
	// unknown (no sysfs, an empty file).
	Kernel string
	// Pending says what the default clock still waits for: the choice of
	// its counter itself (from its first use until the background set-up
	// has made it), a cross-CPU check to retry, a rate to measure; empty
	// when nothing is pending.
	Pending string
}

// Info returns the clock's current configuration: a snapshot taken as the
// last writer finished, so Info never waits for a writer, nor for the user
// code (a Read, a reference) a writer may be blocked in.
//
// The default clock chooses its counter in the background, from its
// first use on (Info's included); the choice takes milliseconds. Until
// it is made, Source is "portable", the Go monotonic clock that the
// default clock reads meanwhile, and Evidence.Pending says that the
// choice is pending: an Info that says "portable" with an empty Pending
// is the choice made (Evidence.Rejected says why not the hardware).
func (c *Clock) Info() Info {
	c = c.orDefault()
	p := c.st.policy
	boot := !p.started() && c.st.info.Load() == &bootInfo
	p.wakeFirstUse()
	if boot {
		// A default clock before its set-up (which this first use has
		// just started), whose snapshot no writer has replaced: nothing
		// had changed since its boot when Info was called (every writer
		// starts the set-up first), so it is bootInfo, without running
		// infoLocked's code (a first Info would fault its pages in).
		in := bootInfo
		in.KernelTime, in.WallBound = kernelUnmapped(), wallBoundInfo(c)
		return in
	}
	if c.st.mu.TryLock() {
		// Fresh when no writer holds the lock; otherwise the snapshot the
		// last writer left, so that a writer stuck in user code (a
		// reference that blocks) never blocks Info. A snapshot that
		// has not changed is kept (a first Info allocates nothing).
		in := c.infoLocked()
		if last := c.st.info.Load(); last == nil || *last != in {
			fresh := new(Info)
			*fresh = in
			c.st.info.Store(fresh)
		}
		c.st.mu.Unlock()
		return in
	}
	if in := c.st.info.Load(); in != nil {
		snap := *in
		if snap.KernelTime == "" { // bootInfo's
			snap.KernelTime = kernelUnmapped()
		}
		return snap
	}
	return Info{}
}

func (c *Clock) infoLocked() Info {
	var bracket time.Duration
	if c.st.track != nil {
		bracket = time.Duration(c.st.track.bracket)
	}
	var period time.Duration
	if c.st.conv.mult != 0 { // zero for a zero Clock
		period = c.st.conv.refreshPeriod()
	}
	var convErr float64
	if c.st.conv.mult != 0 {
		convErr = c.st.conv.errorPPM(c.st.rate.hz)
	}
	in := Info{
		Source:             c.st.src.Name,
		Rate:               c.st.src.Rate,
		RateOrigin:         c.st.rate.origin.String(),
		RateErrorPPM:       c.st.rate.errPPM,
		ConversionErrorPPM: convErr,
		Watch: Watch{
			Reanchors:        c.st.watch.reanchors,
			LastReanchor:     c.st.watch.lastReanchor,
			CounterFaults:    c.st.watch.counterFaults,
			LastCounterFault: c.st.watch.lastCounterFault,
			Holding:          c.st.held,
			StandStill:       c.st.watch.standStill,
			Reference:        c.st.watch.reference,
			Bracket:          bracket,
		},
		Faults:        c.st.faults.count,
		LastFault:     c.st.faults.last,
		LostWraps:     c.st.fold.lostWraps,
		Bits:          c.st.src.Bits,
		Mult:          c.st.conv.mult,
		Shift:         c.st.conv.shift,
		RefreshPeriod: period,
		Suspended:     c.st.suspended,
		Closed:        c.stoppedLocked(),
		KernelTime:    c.st.kernel.info,
		WallBound:     wallBoundInfo(c),
	}
	if in.KernelTime == "" {
		in.KernelTime = kernelUnmapped()
	}
	c.st.policy.fillInfo(&in)
	return in
}

// An Option configures a Clock made by New: WithReference,
// WithCoarseResolution.
type Option struct {
	apply func(*options) error
}

// options is what New's Options set.
type options struct {
	reference   func() int64
	coarseEvery time.Duration
	seen        map[string]bool // the Options given, by name
}

// WithReference gives the Clock a trusted nanosecond clock to follow: the
// Clock refines its counter's rate against it in the background and
// watches the counter against it for life, re-anchoring the clock when
// the counter steps back, jumps or changes rate (see [Watch] Reanchors),
// and refusing a reading far ahead of what now counted (see [Watch]
// CounterFaults: the clock then stands still until now catches up with
// what readers may have read, never back).
// The default clock's reference is CLOCK_MONOTONIC_RAW.
//
// now must be safe for concurrent use, should never go backwards, and
// should not call the Clock's methods other than Now and Info: it is
// called while the Clock's writer lock is held, and Register, Update,
// Suspend, Resume and Close called from it return an error (they would
// wait for themselves), changing nothing. It is
// called from the Clock's background goroutine only, in bursts (8
// bracketed reads for each comparison of the watch, 32 for each
// refinement of the rate) on at most ten wake-ups a second: the watch
// compares every 100 ms at first, then at periods doubling to 2 s while
// the counter agrees, and
// refinements ride on its wake-ups. A reference that
// misbehaves is checked against the runtime's monotonic clock (on a
// Clock that New made inside a testing/synctest bubble on a Source of
// the caller's, against the bubble's clock, which such a Source and its
// reference read): one that
// stops, steps back, jumps or runs more than 1000 ppm away from it is not
// followed (no re-anchoring, no refinement) until it agrees again, and
// Info.Watch.Reference says what it did; one that panics is counted in
// Info.Faults. One that blocks delays the clock's background work (and
// Close) but never Now, Coarse or Info.
func WithReference(now func() int64) Option {
	return Option{func(o *options) error {
		if now == nil {
			return errors.New("WithReference: the reference clock is nil")
		}
		if err := o.once("WithReference"); err != nil {
			return err
		}
		o.reference = now
		return nil
	}}
}

// WithCoarseResolution sets how often the value Coarse returns is brought
// up to date: from 100µs to 1s; the default is 1ms.
func WithCoarseResolution(d time.Duration) Option {
	return Option{func(o *options) error {
		if d < minCoarseResolution || d > maxCoarseResolution {
			return fmt.Errorf("WithCoarseResolution(%v): want %v to %v", d, minCoarseResolution, maxCoarseResolution)
		}
		if err := o.once("WithCoarseResolution"); err != nil {
			return err
		}
		o.coarseEvery = d
		return nil
	}}
}

// once refuses an Option given twice: which one should win is not for
// this package to guess.
func (o *options) once(name string) error {
	if o.seen[name] {
		return fmt.Errorf("%s given twice", name)
	}
	if o.seen == nil {
		o.seen = map[string]bool{}
	}
	o.seen[name] = true
	return nil
}

// apply collects opts, turning the first bad one into an error wrapping
// errInvalidOption.
func (o *options) apply(opts []Option) error {
	for _, opt := range opts {
		if opt.apply == nil {
			return fmt.Errorf("%w: a zero Option (make Options with WithReference, WithCoarseResolution)", errInvalidOption)
		}
		if err := opt.apply(o); err != nil {
			return fmt.Errorf("%w: %v", errInvalidOption, err)
		}
	}
	return nil
}
