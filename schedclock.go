package schedclock

import (
	"fmt"
	"math"
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
	_     [128 - unsafe.Sizeof(latch{})]byte
	// coarse has a cache line of its own: it is written at every coarse
	// tick, and readers of Now must not see their line invalidated then.
	coarse coarseLine
	// The writer's side lives apart: nothing a reader loads shares its
	// lines. It is nil in a zero Clock.
	*clockState
	_ [clockSize - 128 - unsafe.Sizeof(coarseLine{}) - unsafe.Sizeof(&clockState{})]byte
}

// clockSize is a Go size class that is a multiple of 64, and at most 512
// bytes (larger objects start after an 8-byte allocation header), so that
// every Clock, and so its latch, starts on a 64-byte boundary
// (TestLatchLayout checks it).
const clockSize = 256

// clockState is the writer's side of a Clock.
type clockState struct {
	mu        sync.Mutex
	cur       line // what readers are given, as the writer knows it
	src       Source
	conv      conversion // src's conversion (cur.conv differs only while suspended)
	rate      rating     // src's rate, exactly as estimated, and where it came from
	suspended bool
	closed    bool
	rejected  string // why the default clock is not on a hardware counter

	// track calibrates and watches the counter against a reference; nil
	// for a clock without one (see calibrate.go).
	track        *tracker
	reanchors    int
	lastReanchor string
	// verdict, on the default clock, says why the hardware counter can
	// no longer be trusted ("" while it can); checked every verdictPeriod.
	verdict    func() string
	verdictDue time.Time
	// trustPending holds back the adoption of the hardware counter until
	// the default clock's background checks of it pass; crossCPU and
	// counterCheck say what those checks found (see checkTrust).
	trustPending bool
	crossCPU     string
	counterCheck string

	// coarseEvery is Coarse's resolution; once Coarse has been called,
	// coarseStop stops the goroutine that keeps it current, which closes
	// coarseDone as it exits.
	coarseEvery            time.Duration
	coarseStop, coarseDone chan struct{}

	wallState

	foldDue time.Time     // when the background goroutine folds next
	wake    chan struct{} // tells the background goroutine to look again
	stop    chan struct{}
	stopped chan struct{}

	// step is called between the writer's steps; tests use it to stop the
	// writer at each of them. It is a no-op otherwise.
	step func(string)
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
// trusted to fold it in time (see Source); and one wrapping
// ErrInvalidOption for a bad Option.
func New(src Source, opts ...Option) (*Clock, error) {
	var o options
	if err := o.apply(opts); err != nil {
		return nil, err
	}
	var tr *tracker
	if o.reference != nil {
		tr = &tracker{ref: o.reference, src: src, adopted: true}
	}
	c, err := newClock(src, rating{hz: float64(src.Rate), origin: RateDeclared}, tr)
	if err != nil {
		return nil, err
	}
	if o.coarseEvery != 0 {
		c.coarseEvery = o.coarseEvery
	}
	c.start()
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
	c := &Clock{clockState: &clockState{
		src: src, conv: conv, rate: rate, track: tr,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{}),
		step: noStep, coarseEvery: defaultCoarseResolution,
	}}
	if tr != nil {
		tr.restart = true
	}
	c.publishLocked(line{read: src.Read, conv: conv, epochCyc: cyc & conv.mask})
	c.foldDue = time.Now().Add(conv.refreshPeriod())
	return c, nil
}

func (c *Clock) start() { go c.background() }

// otherNow is Now for a bank that does not read the TSC (on amd64 Now
// reads the TSC itself, in assembly, and hands every other bank over to
// this): the reader side of the latch (see latch) for the portable
// source, with Go's monotonic clock read inline and then orderAfter, so
// that the seq re-check cannot be satisfied before the clock was read;
// and, for any other counter, the generic reader now.
func otherNow(c *Clock) int64 {
	seq := c.latch.seq.Load()
	for {
		b := &c.latch.banks[seq&1]
		if atomic.LoadPointer(&b.read) != portableReadPtr {
			return c.now()
		}
		cyc := uint64(time.Since(monoBase))
		orderAfter(cyc)
		scale := b.scale.Load()
		var ns int64
		if cyc-b.epochCyc.Load() <= b.fastMax.Load() {
			ns = b.epochNs.Load() + int64((cyc*(scale>>32)+b.base.Load())>>(scale>>8&63))
		} else {
			ns = b.slowNanos(cyc, scale)
		}
		next := c.latch.seq.Load()
		if next == seq {
			return ns
		}
		seq = next
	}
}

// Since returns the time elapsed since start, a value Now returned:
// Now() - start, saturated so that it is never negative (a start read
// from another clock, or not yet reached, gives 0) and never wraps.
func (c *Clock) Since(start int64) time.Duration {
	now := c.Now()
	if now <= start {
		return 0
	}
	if d := now - start; d > 0 {
		return time.Duration(d)
	}
	return math.MaxInt64 // the difference passed math.MaxInt64
}

// now is the reader side of the latch (see latch) for any counter. On
// amd64, Now does the same for the TSC in assembly.
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
	if c.clockState == nil {
		return // a zero Clock
	}
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
// Register never makes time go back, wherever the writer is stopped (the
// switch protocol: see switch.go), and loses none of the time it takes:
// the two counters are related after the old one is frozen. A src whose
// Read panics is refused with ErrInvalidSource, the clock unchanged. On
// the default clock, a Register ends the background calibration and
// watch of the hardware counter; on a clock made with WithReference,
// they move to src.
func (c *Clock) Register(src Source) error {
	conv, err := newConversion(src)
	if err != nil {
		return err
	}
	if c.clockState == nil {
		return fmt.Errorf("%w: cannot register %q on a zero Clock", ErrClosed, src.Name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stoppedLocked() {
		return fmt.Errorf("%w: cannot register %q", ErrClosed, src.Name)
	}
	if src.Rate < c.src.Rate {
		return fmt.Errorf("%w: %q runs at %d Hz, the current %q at %d Hz", ErrSlowerSource, src.Name, src.Rate, c.src.Name, c.src.Rate)
	}
	tr := c.track
	if tr != nil && tr.endsOnRegister {
		// The caller has taken the default clock over: its calibration
		// and watch of the hardware counter end, and no background
		// refinement will switch away from src.
		c.track, c.verdict = nil, nil
	}
	if err := c.switchLocked(src, conv, rating{hz: float64(src.Rate), origin: RateDeclared}); err != nil {
		c.track = tr
		return err
	}
	if c.track != nil {
		// A clock made by New with a reference: calibration and the
		// watch move to src.
		c.track.src, c.track.adopted, c.track.restart = src, true, true
		c.kick()
	}
	return nil
}

// Close stops the background goroutines and waits for them to exit. Now
// keeps answering (Coarse stands at its last value): on a counter of 64 bits it stays exact for centuries (deltas
// too large for 64-bit arithmetic take a 128-bit path), while a narrower
// counter is no longer folded and will wrap. After Close, Register returns
// ErrClosed and Update, Suspend and Resume do nothing, so a clock closed
// while suspended stays frozen. A second Close returns ErrClosed.
func (c *Clock) Close() error {
	if c.clockState == nil {
		return ErrClosed
	}
	c.mu.Lock()
	if c.stoppedLocked() {
		c.mu.Unlock()
		return ErrClosed
	}
	c.closed = true
	c.track, c.verdict = nil, nil
	close(c.stop)
	coarseStopped := c.stopCoarseLocked()
	c.mu.Unlock()
	<-c.stopped
	<-coarseStopped
	return nil
}

// stoppedLocked reports whether the clock takes no more changes.
func (c *Clock) stoppedLocked() bool { return c.closed }

// kick makes the background goroutine look at its schedule again.
func (c *Clock) kick() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// background is the kernel's sched_clock_poll hrtimer and more: it folds
// the counter into the epoch every refresh period (see
// conversion.refreshPeriod), and, on a clock with a reference, calibrates
// and watches the counter (see calibrate.go).
func (c *Clock) background() {
	defer close(c.stopped)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		timer.Reset(time.Until(c.tick(time.Now())))
		select {
		case <-c.stop:
			return
		case <-c.wake:
		case <-timer.C:
		}
	}
}

// tick does what is due and returns when something is next due. A Read or
// reference that panics leaves the clock as it was; the work is tried
// again a watch period later.
func (c *Clock) tick(now time.Time) (next time.Time) {
	defer func() {
		if recover() != nil {
			next = now.Add(watchPeriod)
		}
	}()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stoppedLocked() {
		return now.Add(time.Hour)
	}
	if !c.suspended && c.verdict != nil && !now.Before(c.verdictDue) {
		c.verdictDue = now.Add(verdictPeriod)
		if why := c.verdict(); why != "" {
			c.fallBackLocked(why)
		}
	}
	if tr := c.track; tr != nil && !c.suspended {
		c.trackLocked(tr, now)
	}
	if !now.Before(c.foldDue) {
		if !c.suspended {
			c.updateLocked()
		}
		c.foldDue = now.Add(c.conv.refreshPeriod())
	}
	next = c.foldDue
	if !c.wallDue.IsZero() {
		if !now.Before(c.wallDue) {
			c.refreshWallLocked()
			c.wallDue = now.Add(wallPeriod)
		}
		if c.wallDue.Before(next) {
			next = c.wallDue
		}
	}
	if c.verdict != nil && c.verdictDue.Before(next) {
		next = c.verdictDue
	}
	if tr := c.track; tr != nil && !c.suspended && tr.nextDue().Before(next) {
		next = tr.nextDue()
	}
	return next
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
	// ConversionErrorPPM is the conversion's own error: how far
	// Mult*2^-Shift ns per cycle is from 1e9/rate, in ppm (included in
	// RateErrorPPM).
	ConversionErrorPPM float64
	// Reanchors counts how many times the watch of a clock with a
	// reference re-anchored the clock on the reference's timeline (its
	// counter stepped back, jumped or changed rate); LastReanchor says
	// why, the last time.
	Reanchors    int
	LastReanchor string
	// CrossCPU says what the default clock's cross-CPU check of its
	// hardware counter found (the kernel's check_tsc_warp): no warp, a
	// warp (which CPUs, how large), or why it could not run (one allowed
	// CPU, affinity not settable, not Linux). Empty for clocks made by New.
	CrossCPU string
	// CounterCheck, on arm64, says which counter erratum the default
	// clock found and works around, and what a counter read costs against
	// the portable source (a counter the kernel traps is slower).
	CounterCheck string
}

// Info returns the clock's current configuration.
func (c *Clock) Info() Info {
	if c.clockState == nil {
		return Info{Closed: true}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var period time.Duration
	if c.conv.mult != 0 { // zero for a zero Clock
		period = c.conv.refreshPeriod()
	}
	var convErr float64
	if c.conv.mult != 0 {
		convErr = c.conv.errorPPM(c.rate.hz)
	}
	return Info{
		Source:             c.src.Name,
		Rate:               c.src.Rate,
		RateOrigin:         c.rate.origin,
		RateErrorPPM:       c.rate.errPPM,
		ConversionErrorPPM: convErr,
		Reanchors:          c.reanchors,
		LastReanchor:       c.lastReanchor,
		CrossCPU:           c.crossCPU,
		CounterCheck:       c.counterCheck,
		Bits:               c.src.Bits,
		Mult:               c.conv.mult,
		Shift:              c.conv.shift,
		RefreshPeriod:      period,
		Suspended:          c.suspended,
		Closed:             c.stoppedLocked(),
		Rejected:           c.rejected,
	}
}
