package schedclock

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// A Clock turns a free-running counter into monotonic nanoseconds. Now is
// wait-free and safe for any number of goroutines; Register, Update,
// Suspend, Resume and Close are serialised by the Clock.
//
// A Clock must be created with New. A zero Clock reads 0 and behaves as a
// closed one.
type Clock struct {
	// latch must stay the first field: its first 64 bytes (seq and bank 0)
	// must start on a 64-byte boundary. See latch.
	latch latch
	clockState
	_ [clockSize - unsafe.Sizeof(latch{}) - unsafe.Sizeof(clockState{})]byte
}

// clockSize is a Go size class that is a multiple of 64, so that every
// Clock, and so its latch, starts on a 64-byte boundary (TestLatchLayout
// checks it). The build fails if clockState outgrows it.
const clockSize = 384

// clockState is the writer's side of a Clock.
type clockState struct {
	mu        sync.Mutex
	cur       line // what readers are given, as the writer knows it
	src       Source
	conv      conversion // src's conversion (cur.conv differs only while suspended)
	origin    RateOrigin
	errPPM    float64
	suspended bool
	closed    bool
	rejected  string // why the default clock is not on a hardware counter

	period  atomic.Int64  // refresh period in ns, read by the refresh goroutine
	wake    chan struct{} // tells the refresh goroutine the period changed
	stop    chan struct{}
	stopped chan struct{}

	// step is called between the writer's steps; tests use it to stop the
	// writer at each of them. It is a no-op otherwise.
	step func(string)
}

func noStep(string) {}

// New returns a running Clock on src, reading near 0 ns now, with its
// refresh goroutine started (stop it with Close). It returns an error
// wrapping ErrInvalidSource if src is unusable: Read nil, Bits outside
// 1..64, Rate 0, a Rate too high for a 32-bit mult, or a counter so narrow
// and fast that it would have to be folded more often than every 10µs.
func New(src Source) (*Clock, error) {
	return newClock(src, RateDeclared, 0)
}

func newClock(src Source, origin RateOrigin, errPPM float64) (*Clock, error) {
	conv, err := newConversion(src)
	if err != nil {
		return nil, err
	}
	c := &Clock{clockState: clockState{
		src: src, conv: conv, origin: origin, errPPM: errPPM,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{}),
		step: noStep,
	}}
	c.cur = line{read: src.Read, conv: conv, epochCyc: src.Read() & conv.mask}
	c.latch.publish(&c.cur, c.step)
	c.period.Store(int64(conv.refreshPeriod()))
	go c.refreshLoop()
	return c, nil
}

// Now returns the clock's time in nanoseconds. It never waits for a
// writer, never allocates, and never returns less than a call that
// happened before it, given a counter that is monotonic across CPUs and,
// for a counter narrower than 64 bits, a refresh goroutine that runs
// within its refresh period (a wrap that nothing folded in time is lost,
// as in the kernel).
func (c *Clock) Now() int64 {
	ns, cyc, seq, state := tscNow(&c.latch)
	switch state {
	case tscDone:
		return ns
	case tscSlow:
		if ns, ok := c.tscSlowNanos(cyc, seq); ok {
			return ns
		}
	}
	return c.now()
}

// tscSlowNanos finishes tscNow's slow case: tscNow read the TSC and then
// found seq unchanged; convert its reading with the same bank, and check
// seq once more for the fields loaded here (ok is false if the bank may
// have been rewritten under them).
func (c *Clock) tscSlowNanos(cyc, seq uint64) (ns int64, ok bool) {
	b := &c.latch.banks[seq&1]
	ns = b.slowNanos(cyc, b.scale.Load())
	return ns, c.latch.seq.Load() == seq
}

// The outcomes of tscNow.
const (
	tscDone  = 1 // ns is the time
	tscSlow  = 2 // the bank reads the TSC; cyc needs the slow path
	tscOther = 3 // the bank reads another counter
)

// now is the reader side of the latch (see latch) for any counter. On
// amd64, tscNow does the same for the TSC in assembly.
func (c *Clock) now() int64 {
	for {
		seq := c.latch.seq.Load()
		b := &c.latch.banks[seq&1]
		// The counter is read after seq and the read function are loaded
		// (the read function orders it so) and before seq is checked
		// again. The rest of the bank is loaded after it: while seq does
		// not change, the bank is the one published before the first load
		// of seq, so its epochCyc was read before this counter value, and
		// loading it late keeps it out of the counter read's way.
		read := atomic.LoadPointer(&b.read)
		if read == nil {
			return 0 // a zero Clock, never started by New
		}
		cyc := ptrFunc(read)()
		scale := b.scale.Load()
		var ns int64
		if cyc-b.epochCyc.Load() <= b.fastMax.Load() {
			ns = b.epochNs.Load() + int64((cyc*(scale>>32)+b.base.Load())>>(scale>>8&63))
		} else {
			ns = b.slowNanos(cyc, scale)
		}
		if c.latch.seq.Load() == seq {
			return ns
		}
	}
}

// Update folds the counter elapsed since the epoch into the epoch, so that
// the counter can wrap without time being lost. The refresh goroutine
// calls it every refresh period; calling it more often is harmless. It
// does not move time by even a nanosecond: the sub-nanosecond remainder
// is carried into the new epoch.
//
// Update does nothing while the clock is suspended or after Close.
func (c *Clock) Update() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stoppedLocked() || c.suspended {
		return
	}
	c.updateLocked()
}

func (c *Clock) updateLocked() {
	cyc := c.cur.read()
	next := c.cur
	next.epochNs, next.frac = c.cur.at(cyc)
	next.epochCyc = cyc & c.cur.conv.mask
	c.publishLocked(next)
}

func (c *Clock) publishLocked(ln line) {
	c.cur = ln
	c.latch.publish(&c.cur, c.step)
}

// Register switches the clock to src, keeping time continuous: the new
// counter takes over from the exact value the old one had reached.
//
// A src whose Rate is lower than the current source's is refused with
// ErrSlowerSource (the kernel's "rate wins" rule); an equal or higher Rate
// replaces the current source. An invalid src is refused with
// ErrInvalidSource, and a closed clock refuses with ErrClosed; a refused
// Register changes nothing.
//
// Register is safe against a stopped writer: see switchLine.
func (c *Clock) Register(src Source) error {
	conv, err := newConversion(src)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stoppedLocked() {
		return fmt.Errorf("%w: cannot register %q", ErrClosed, src.Name)
	}
	if src.Rate < c.src.Rate {
		return fmt.Errorf("%w: %q runs at %d Hz, the current %q at %d Hz", ErrSlowerSource, src.Name, src.Rate, c.src.Name, c.src.Rate)
	}
	c.switchLocked(src, conv, RateDeclared, 0)
	return nil
}

// switchLocked makes src, with conversion conv, the clock's source.
func (c *Clock) switchLocked(src Source, conv conversion, origin RateOrigin, errPPM float64) {
	sameCounter := funcPtr(src.Read) == funcPtr(c.src.Read) && conv.mask == c.conv.mask
	c.src, c.conv, c.origin, c.errPPM = src, conv, origin, errPPM
	if c.suspended {
		c.publishLocked(frozenLine(c.cur, conv))
	} else {
		c.switchLine(src.Read, conv, sameCounter)
	}
	c.setPeriod(conv.refreshPeriod())
}

// switchLine moves readers from the current line to a new counter or a
// new rate without time ever going backwards for any reader, wherever the
// writer is stopped, and without moving time at the switch.
//
// The hazard (DESIGN section 5): between the writer's counter read and
// the publication of the new line, readers keep extrapolating the old
// line. If the new line is slower, or the old counter coarser, a reader
// just before the publication can return more than a reader just after,
// and in Go the writer can be stopped right there for milliseconds.
//
// The cure is to let the publication itself fix the switch point:
//
//  1. Publish the old line unchanged but read through a freezer, a
//     stand-in read function. The first call to it, by a reader or by the
//     writer, whichever comes first after the publication, pins the old
//     counter (and then reads the new one), and every call returns that
//     same old counter value: the freezer bank reads a constant V.
//  2. The writer calls the freezer itself, which pins the old counter if
//     no reader has, takes a new-counter value read after the pin, and
//     computes V = old line at the pinned value, exactly, remainder
//     included.
//  3. Publish the new line anchored at (new, V).
//
// Readers that finish on the old bank read their counter before step 1
// became visible (see latch), hence before the freezer's reads, so they
// return at most V. Readers of the freezer bank return V. Readers of the
// new bank read the new counter after the freezer did, so they return at
// least V. This holds for any rate, faster or slower, any granularity of
// either counter, and any pause of the writer: no horizon is assumed.
// The price is that while a writer is stopped between steps 1 and 3,
// time stands still for readers; after step 3 it resumes from V at the
// counter's true pace, catching up at once.
//
// For the same counter (a new rate for it) the new line is anchored at
// the frozen counter value itself, so not even the few nanoseconds
// between two counter reads are lost.
func (c *Clock) switchLine(next func() uint64, conv conversion, sameCounter bool) {
	var pinNext func() uint64
	if !sameCounter {
		pinNext = next
	}
	ns, frac, nextCyc := c.freeze(pinNext, "switch")
	ns, frac = rescaleFrac(ns, frac, c.cur.conv.shift, conv.shift)
	c.publishLocked(line{read: next, conv: conv, epochCyc: nextCyc & conv.mask, epochNs: ns, frac: frac})
	c.step("switch.published")
}

// freeze is steps 1 and 2 of switchLine, shared with Suspend: it
// publishes the current line read through a freezer, pins it, and returns
// the value V it froze at (in the current line's shift) and a value of
// next read after the pin (the pinned old counter if next is nil).
func (c *Clock) freeze(next func() uint64, stepPrefix string) (ns int64, frac, nextCyc uint64) {
	fz := c.newFreezer()
	fz.next = next
	frozen := c.cur
	frozen.read = fz.read
	c.publishLocked(frozen)
	c.step(stepPrefix + ".frozen")
	oldCyc, nextCyc := fz.fix()
	c.step(stepPrefix + ".fixed")
	ns, frac = frozen.at(oldCyc)
	return ns, frac, nextCyc
}

// rescaleFrac re-expresses ns + frac*2^-from as ns' + frac'*2^-to,
// rounding up so that time never moves backwards.
func rescaleFrac(ns int64, frac uint64, from, to uint32) (int64, uint64) {
	frac = convertFrac(frac, from, to)
	if frac >= uint64(1)<<to {
		ns++
		frac -= uint64(1) << to
	}
	return ns, frac
}

// freezer is the stand-in read function of step 1 of switchLine (and of
// Suspend): it pins the old counter at its first read after it was
// published, and whoever pins it reads the new counter right after.
//
// "After it was published" needs care: the writer stores the freezer in
// bank 1 before it increments seq, and a reader that loaded an odd seq
// during an earlier publication and was delayed can find it there first.
// Such a reader's seq check is bound to fail, but if it pinned the
// counter, readers still on the published bank could go on to read later
// values. So the freezer pins only once seq has reached armedAt, the
// value its publication gives seq; before that it reads the old counter
// without pinning.
//
// Pinning allocates nothing, so neither does a Now that does it: the pin
// is kept as 1 + the delta of the old counter from the frozen line's
// epochCyc, clamped as readers clamp it. A clamped delta is below the
// mask's negative zone, so 1 + delta never wraps to 0, which means "not
// pinned yet".
type freezer struct {
	old, next      func() uint64
	epochCyc, mask uint64 // the frozen line's
	seq            *atomic.Uint64
	armedAt        uint64
	pinned         atomic.Uint64
	nextCyc        atomic.Uint64 // the new counter, read by the pinner after pinning
	nextSet        atomic.Bool
}

// newFreezer returns a freezer of the current line, armed by the
// publication the writer is about to make.
func (c *Clock) newFreezer() *freezer {
	return &freezer{old: c.cur.read, epochCyc: c.cur.epochCyc, mask: c.cur.conv.mask,
		seq: &c.latch.seq, armedAt: c.latch.seq.Load() + 1}
}

func (fz *freezer) read() uint64 {
	if p := fz.pinned.Load(); p != 0 {
		return fz.epochCyc + p - 1
	}
	if fz.seq.Load() < fz.armedAt {
		return fz.old()
	}
	delta := clampDelta((fz.old()-fz.epochCyc)&fz.mask, fz.mask)
	if fz.pinned.CompareAndSwap(0, delta+1) && fz.next != nil {
		fz.nextCyc.Store(fz.next())
		fz.nextSet.Store(true)
	}
	return fz.epochCyc + fz.pinned.Load() - 1
}

// fix is the writer's side, called after publishing the freezer: it pins
// the old counter unless a reader already has, and returns the pinned
// value with a new-counter value read after the pin (the pinner's, or,
// if that one is not stored yet, the writer's own).
func (fz *freezer) fix() (oldCyc, nextCyc uint64) {
	oldCyc = fz.read()
	switch {
	case fz.next == nil:
		return oldCyc, oldCyc
	case fz.nextSet.Load():
		return oldCyc, fz.nextCyc.Load()
	}
	return oldCyc, fz.next()
}

// Close stops the refresh goroutine and waits for it to exit. Now keeps
// answering: on a counter of 64 bits it stays exact for centuries (deltas
// too large for 64-bit arithmetic take a 128-bit path), while a narrower
// counter is no longer folded and will wrap. After Close, Register returns
// ErrClosed and Update, Suspend and Resume do nothing, so a clock closed
// while suspended stays frozen. A second Close returns ErrClosed.
func (c *Clock) Close() error {
	c.mu.Lock()
	if c.stoppedLocked() {
		c.mu.Unlock()
		return ErrClosed
	}
	c.closed = true
	close(c.stop)
	c.mu.Unlock()
	<-c.stopped
	return nil
}

// stoppedLocked reports whether the clock takes no more changes: it was
// closed, or it is a zero Clock that New never started (which reads 0 and
// behaves as closed).
func (c *Clock) stoppedLocked() bool { return c.closed || c.cur.read == nil }

func (c *Clock) setPeriod(p time.Duration) {
	if time.Duration(c.period.Swap(int64(p))) != p {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// refreshLoop is the kernel's sched_clock_poll hrtimer: it folds the
// counter into the epoch every refresh period, half of the time the
// counter takes to reach the negative zone or 64-bit overflow, so no wrap
// is missed even if the goroutine runs late by as much again.
func (c *Clock) refreshLoop() {
	defer close(c.stopped)
	timer := time.NewTimer(time.Duration(c.period.Load()))
	defer timer.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-c.wake:
		case <-timer.C:
			c.Update()
		}
		timer.Reset(time.Duration(c.period.Load()))
	}
}

// Info describes a Clock's configuration.
type Info struct {
	Source        string        // the Source's Name
	Rate          uint64        // Hz
	RateOrigin    RateOrigin    // where Rate came from
	RateErrorPPM  float64       // estimated error of Rate, ppm (0 when declared)
	Bits          int           // counter width
	Mult, Shift   uint32        // ns = cycles*Mult >> Shift
	RefreshPeriod time.Duration // how often the epoch is folded forward
	Suspended     bool
	Closed        bool
	// Rejected says why the default clock does not run on the hardware
	// counter; it is empty when it does, and for clocks made by New.
	Rejected string
}

// Info returns the clock's current configuration.
func (c *Clock) Info() Info {
	c.mu.Lock()
	defer c.mu.Unlock()
	var period time.Duration
	if c.conv.mult != 0 { // zero for a zero Clock
		period = c.conv.refreshPeriod()
	}
	return Info{
		Source:        c.src.Name,
		Rate:          c.src.Rate,
		RateOrigin:    c.origin,
		RateErrorPPM:  c.errPPM,
		Bits:          c.src.Bits,
		Mult:          c.conv.mult,
		Shift:         c.conv.shift,
		RefreshPeriod: period,
		Suspended:     c.suspended,
		Closed:        c.stoppedLocked(),
		Rejected:      c.rejected,
	}
}
