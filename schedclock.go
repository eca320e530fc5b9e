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
	// calibrationOver is set once a caller registers a source: the
	// default clock's background calibration then ends.
	calibrationOver bool

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
	cyc, err := readOnce(src)
	if err != nil {
		return nil, err
	}
	c.cur = line{read: src.Read, conv: conv, epochCyc: cyc & conv.mask}
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
		// tscNow read the TSC and then found seq unchanged; convert its
		// reading with the same bank, and check seq once more for the
		// fields loaded here.
		b := &c.latch.banks[seq&1]
		if ns := b.slowNanos(cyc, b.scale.Load()); c.latch.seq.Load() == seq {
			return ns
		}
	}
	return c.now()
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
	if err := c.switchLocked(src, conv, RateDeclared, 0); err != nil {
		return err
	}
	// The caller has taken the clock over: background calibration of
	// another counter (the default clock's) must not switch away from it.
	c.calibrationOver = true
	return nil
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
