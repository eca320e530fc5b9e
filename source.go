package schedclock

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
	_ "unsafe" // for go:linkname

	"github.com/schedclock/schedclock/internal/format"
	"github.com/schedclock/schedclock/internal/hwcounter"
	"github.com/schedclock/schedclock/internal/vdso"
)

// Source describes a free-running counter that a Clock turns into
// nanoseconds.
//
// Read must be safe to call from many goroutines at once, must not block
// and should be as cheap as possible: it is on the read path of every Now.
// Only the low Bits bits of its value count; the counter is expected to
// count up at Rate Hz and to wrap from 2^Bits-1 to 0. A counter that
// wraps must take at least 667 ms to do so (16 bits at up to 98 kHz, 32
// bits at up to 6.4 GHz): the Clock's goroutine folds it eight times per
// wrap and may run up to 500 ms late on a loaded machine. A Read that
// panics is refused by New and Register; in the Clock's goroutine, the
// fold is tried again later. Read is called with the Clock's writer lock
// held (by Register, Update, Suspend, Resume and the Clock's goroutine):
// a Read that calls one of those methods, or Close, on the same Clock
// gets an error instead of waiting for itself.
//
// What a narrow counter cannot survive exactly is a stretch in which the
// Clock's goroutine cannot run at all (a non-preemptible assembly loop on
// every P, a process stopped or descheduled by the OS). Readers
// are exact while the last fold is less than 7/8 of a wrap old: a stretch
// longer than 3/4 of the wrap period (7/8 of it less the refresh period,
// Info().RefreshPeriod) can make a Now read during it, or after it and
// before the next fold, step back by up to the time since the last fold.
// A stretch longer than the wrap period less the refresh period hides
// whole wraps (the counter's low Bits bits cannot show them). The next
// fold puts both right: it measures, on the runtime's monotonic clock,
// how long ago the last fold was; a counter value that readers took for
// a step back it takes for the progress it is, and it adds back the
// whole wraps that time says were lost, exactly, counting them in
// Info().LostWraps. A counter that did not follow its Rate meanwhile
// to within 1/8 of a wrap (stopped, stepped back, driven by hand) is not
// second-guessed. A 64-bit counter at up to 10 GHz takes over 58 years to
// wrap and is exempt.
type Source struct {
	Name string
	Read func() uint64
	Bits int
	Rate uint64 // Hz

	// manual is the manual counter behind a Source from its Source method.
	manual *manual
	// bubble is where a Source from Bubble started.
	bubble *bubbleOrigin
}

// The errors a caller can act on. Every error this package returns
// wraps one of these or says why in words alone; test them with
// errors.Is.
var (
	// ErrInvalidSource: a Source given to New or Register is unusable (nil
	// Read, a Read that panics, Bits outside 1..64, Rate 0, or a counter
	// that wraps too fast to be tracked).
	ErrInvalidSource = errors.New("schedclock: invalid source")
	// ErrSlowerSource: Register was given a Source whose Rate is lower
	// than the current one (the kernel's "rate wins" rule).
	ErrSlowerSource = errors.New("schedclock: source is slower than the current one")
	// ErrClosed: the Clock was closed.
	ErrClosed = errors.New("schedclock: clock is closed")
	// ErrUnsupported: the counter asked for (Hardware, Paravirt, Raw,
	// Boottime) does not exist on this platform or in this build, or
	// cannot be trusted as a clock on this machine; the message says why.
	// Portable works everywhere.
	ErrUnsupported = errors.New("schedclock: counter not supported here")
	// ErrFault: user code the clock called (a Source's Read) panicked
	// during the call that returns it; the clock was left exactly as it
	// was before the call, and Info counts the fault. The call may be
	// tried again.
	ErrFault = errors.New("schedclock: source faulted")
)

// The counters' refusals (internal/hwcounter) wrap ErrUnsupported, which
// that package cannot import from here: it is handed over as a store that
// package initialisation makes itself, as linkManual's.
var _ = linkUnsupported()

func linkUnsupported() bool {
	hwcounter.ErrUnsupported = ErrUnsupported
	return true
}

// The errors that report a caller's mistake, which no program handles at
// run time: each says what went wrong, and tests match them
// (export_test.go).
var (
	// errUntrusted: the hardware counter exists but cannot be trusted as
	// a clock on this machine. It is an ErrUnsupported to errors.Is.
	errUntrusted = hwcounter.ErrUntrusted
	// errInvalidOption: an Option given to New is unusable (a nil
	// reference clock, a duplicate Option, ...).
	errInvalidOption = errors.New("schedclock: invalid option")
	// errDefaultClock: the call would stop the process-wide default
	// clock, which every package of the process shares (Close).
	errDefaultClock = errors.New("schedclock: the default clock cannot be closed")
	// errReentered: a writer method (Register, Update, Suspend, Resume,
	// Close) was called by user code that the same Clock's writer was
	// running (a Source's Read, a reference): the writer holds the
	// Clock's lock, so the call would wait for itself forever. It
	// changes nothing, and the writer that ran the user code goes on.
	errReentered = errors.New("schedclock: writer method called from inside the clock's own writer")
)

func (s Source) validate() error {
	switch {
	case s.Read == nil:
		return format.Errorf("%w %q: Read is nil", ErrInvalidSource, s.Name)
	case s.Bits < 1 || s.Bits > 64:
		return format.Errorf("%w %q: Bits = %d, want 1..64", ErrInvalidSource, s.Name, s.Bits)
	case s.Rate == 0:
		return format.Errorf("%w %q: Rate is 0 Hz", ErrInvalidSource, s.Name)
	}
	return nil
}

// runtimeNano is the runtime's monotonic clock, the one time.Now and
// time.Since read (CLOCK_MONOTONIC through the vDSO on Linux), but read
// directly: inside a testing/synctest bubble time.Since returns the
// bubble's fake time, while the runtime's own clock goes on with the
// machine's. The runtime keeps this linkname working for the packages
// that use it ("Many external packages also linkname nanotime",
// runtime/time_nofake.go).
//
//go:linkname runtimeNano runtime.nanotime
func runtimeNano() int64

// readMono reads Go's monotonic clock, ordered before the caller's later
// loads (see orderAfter). Clock.Now recognises it (portableReadPtr) and reads
// runtimeNano inline.
func readMono() uint64 {
	v := uint64(runtimeNano())
	orderAfter(v)
	return v
}

// portableReadPtr identifies readMono in a bank's read field.
var portableReadPtr = funcPtr(readMono)

// Portable returns a Source built on Go's monotonic clock (the runtime's
// nanotime, CLOCK_MONOTONIC on Linux): 1 GHz, 63 bits, available on every
// platform, ready at once. It follows the kernel's NTP frequency
// corrections, so it is steered rather than raw.
func Portable() Source {
	return Source{Name: "portable", Read: readMono, Bits: 63, Rate: 1_000_000_000}
}

// orderSink is what orderAfter loads: it is never written, so every core
// keeps it in its cache.
var orderSink [2]atomic.Uint64

// orderAfter returns once v is known, through a load whose address depends
// on v, so that the caller's later loads (a latch's seq re-check) cannot be
// satisfied before the counter read that produced v: a load cannot be
// performed before its address is known, x86 keeps later loads after it
// (Intel SDM Vol. 3A 9.2.2, "Reads are not reordered with other reads"),
// and on arm64 it is an acquire (LDAR), which orders every later load
// after it. v>>63 is 0 for every value it is given (nanoseconds since
// the machine started), but neither the compiler nor the CPU can know
// that before v. The hardware counters' readers do the same in assembly;
// the portable source, which reads the clock through the Go runtime, uses
// this, in every build (purego included).
func orderAfter(v uint64) {
	orderSink[v>>63].Load()
}

// Bubble returns a Source that reads the time package's clock: the
// monotonic reading of time.Now, at 1 GHz, 64 bits. Inside a
// testing/synctest bubble that is the bubble's fake time, which moves
// only when every goroutine of the bubble is blocked (time.Sleep(time.Hour)
// returns at once with the clock an hour on): a Clock made on it there
// follows the bubble, as the code under test's timers and sleeps do, where
// the default clock and every other Source read the machine's counter and
// see only the real time that passed.
//
//	synctest.Test(t, func(t *testing.T) {
//		c, _ := schedclock.New(schedclock.Bubble())
//		defer c.Close() // inside the bubble, so that it can end
//		start := c.Now()
//		time.Sleep(time.Minute)
//		// c.Since(start) == time.Minute, exactly
//	})
//
// schedclocktest.NewBubbleClock(t) does the first two lines, the Close
// at the test's cleanup. Coarse on such a Clock is Now, exact (as on a
// schedclocktest.Manual counter): a ticker would wake at the same fake
// instant as the test's own sleeps, in an order the bubble does not fix.
//
// The Source counts from the moment Bubble is called; call it inside the
// bubble. Its limits:
//   - outside a bubble it reads the real time (Go's monotonic clock, as
//     Portable does, through time.Now: slower than Portable, and steered
//     by NTP like it), so a Clock on it is an ordinary clock there;
//   - its Rate is declared, never refined (fake time has no rate to
//     measure): do not give its Clock a reference;
//   - a Clock on it has the wall time of the bubble: WallTime(t) is the
//     bubble's time.Now at the moment the clock read t (the bubble's
//     clock starts at 2000-01-01 00:00:00 UTC), exactly and for good, and
//     never the real wall clock (a reading's wall time never changes; after
//     Suspend and Resume, WallTime goes on from the same origin and falls
//     behind the bubble's time.Now by the suspended interval).
func Bubble() Source {
	start := time.Now()
	return Source{
		Name: "bubble (time.Now)",
		Bits: 64,
		Rate: 1_000_000_000,
		Read: func() uint64 {
			v := uint64(time.Since(start))
			orderAfter(v) // the latch's re-check of seq must follow the read
			return v
		},
		bubble: &bubbleOrigin{wall: start.UnixNano()},
	}
}

// bubbleOrigin is the wall time at which a Bubble Source read 0.
type bubbleOrigin struct{ wall int64 }

// adoptExactLocked has the clock's exact answers follow src, the Source
// its line, just published, reads:
//   - a Manual counter answers Coarse and Time exactly, and finds the
//     clock to fold it (see manual.go);
//   - on a Manual counter or a Bubble Source Coarse is Now itself, with
//     no ticker: their time moves only when a test moves it (Advance,
//     Set, a bubble whose goroutines all block), so a ticker would add
//     nothing but the order in which it and the test wake; a value
//     stored before is cleared, so that the next Coarse reads Now;
//   - a Bubble Source's wall origin is the wall time of the clock's
//     reading 0, from the published line (a 1 GHz line counts
//     nanoseconds 1:1, so the counter's value at the epoch says where the
//     bubble's clock was).
//
// Any other Source has none of them.
func (c *Clock) adoptExactLocked(src Source) {
	e := &c.st.exact
	e.manual.Store(src.manual)
	if src.manual != nil {
		src.manual.attach(weakClock(c))
	}
	exact := src.manual != nil || src.bubble != nil
	e.coarse.Store(exact)
	if exact {
		atomic.StoreInt64(&c.coarse.value, 0)
	}
	if src.bubble == nil {
		e.wallOrigin.Store(nil)
		return
	}
	o := addSat(src.bubble.wall, int64(c.st.cur.epochCyc)-c.st.cur.epochNs)
	e.wallOrigin.Store(&o)
}

// Jiffies is a coarse counter advanced by a ticker at HZ, the kernel's
// boot-time sched_clock (jiffy_sched_clock_read). It is ready at once and
// works everywhere, but it only moves at each tick, so a Clock on it
// advances in steps of 1/HZ. Each tick sets the count from Go's monotonic
// clock, so ticks that the runtime drops or delays lose no time.
//
// A nil *Jiffies, like a nil *Clock, panics in no method: Read reads 0,
// Stop does nothing, and New refuses its Source with ErrInvalidSource.
type jiffyCounter struct {
	count atomic.Uint64
	hz    uint64
	start time.Time
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
}

// maxHZ is the highest tick rate NewJiffies accepts.
const maxHZ = 100_000

// NewJiffies starts a jiffy counter ticking at hz (1..MaxHZ). Stop it with
// Stop when it is no longer used.
func newJiffies(hz int) (*jiffyCounter, error) {
	if hz < 1 || hz > maxHZ {
		return nil, format.Errorf("%w %q: HZ = %d, want 1..%d", ErrInvalidSource, "jiffies", hz, maxHZ)
	}
	j := &jiffyCounter{hz: uint64(hz), start: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	go j.tick()
	return j, nil
}

func (j *jiffyCounter) tick() {
	defer close(j.done)
	ticker := time.NewTicker(time.Second / time.Duration(j.hz))
	defer ticker.Stop()
	for {
		select {
		case <-j.stop:
			return
		case <-ticker.C:
			elapsed := uint64(time.Since(j.start))
			j.count.Store(elapsed/uint64(time.Second)*j.hz + elapsed%uint64(time.Second)*j.hz/uint64(time.Second))
		}
	}
}

// Read returns the number of ticks counted so far.
func (j *jiffyCounter) Read() uint64 {
	if j == nil {
		return 0
	}
	return j.count.Load()
}

// Source returns the counter as a Source: 64 bits at HZ.
func (j *jiffyCounter) Source() Source {
	if j == nil {
		return Source{Name: "jiffies (a nil *Jiffies)"} // no Read: New refuses it
	}
	return Source{Name: "jiffies", Read: j.Read, Bits: 64, Rate: j.hz}
}

// Stop stops the ticker and waits for its goroutine to exit; the count
// stays where it is. Stop is idempotent, and does nothing on a zero or
// nil Jiffies.
func (j *jiffyCounter) Stop() {
	if j == nil || j.stop == nil {
		return // never started by NewJiffies
	}
	j.once.Do(func() { close(j.stop) })
	<-j.done
}

// Raw returns CLOCK_MONOTONIC_RAW as a Source: the kernel's clock that
// counts the CPU's own time, unsteered by NTP (to correlate with
// performance counters and other raw hardware clocks), 1 GHz and 64 bits,
// its Read returning the clock's nanoseconds. It reads through the vDSO,
// at a function call's cost, where this package can call it (Linux on
// amd64 and arm64), and through the clock_gettime system call otherwise;
// the Source's Name says which path is in use and why, e.g.
// "CLOCK_MONOTONIC_RAW (vDSO __vdso_clock_gettime (LINUX_2.6))". The
// error wraps ErrUnsupported only where the clock itself does not exist.
func Raw() (Source, error) { return vdsoSource(vdso.MonotonicRaw, "CLOCK_MONOTONIC_RAW") }

// Boottime returns CLOCK_BOOTTIME as a Source, the way Raw does
// CLOCK_MONOTONIC_RAW: the monotonic clock that also counts the time the
// system was suspended, for leases, keepalives and timeouts that must
// expire across a sleep (Go's own monotonic clock stops then).
func Boottime() (Source, error) { return vdsoSource(vdso.Boottime, "CLOCK_BOOTTIME") }

func vdsoSource(id vdso.ID, name string) (Source, error) {
	c, err := vdso.Open(id)
	if err != nil {
		if errors.Is(err, vdso.ErrUnsupported) {
			return Source{}, format.Errorf("%w: %s: %v", ErrUnsupported, name, err)
		}
		return Source{}, format.Errorf("%w: %s cannot be read: %v", errUntrusted, name, err)
	}
	return Source{Name: name + " (" + c.Path() + ")", Bits: 64, Rate: 1_000_000_000, Read: func() uint64 {
		v := uint64(c.Now())
		orderAfter(v) // the latch's re-check of seq must follow the read
		return v
	}}, nil
}
