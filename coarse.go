package schedclock

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/schedclock/schedclock/internal/pvclock"
)

// Coarse's resolution: its default and the range WithCoarseResolution
// accepts.
const (
	defaultCoarseResolution = time.Millisecond
	minCoarseResolution     = 100 * time.Microsecond
	maxCoarseResolution     = time.Second
)

// coarseLine holds the value Coarse returns, on a cache line of its own:
// a reading of Now plus one, 0 when a tick has cleared it (so a coarse
// reading saturates at math.MaxInt64-1 ns); the kernel's vDSO time data,
// where Coarse follows the kernel's ticks too (nil elsewhere: its stamp
// is then always 0, and only the ticker refreshes Coarse); and the
// data's stamp read before the value was taken.
type coarseLine struct {
	value int64  // accessed atomically only
	seen  uint64 // accessed atomically only
	tick  atomic.Pointer[pvclock.TimeData]
	_     [40]byte
}

// current returns the stored value plus one, or 0 if it must be read
// afresh: cleared by a tick, or taken before the kernel's last
// timekeeping update. seen is loaded before value: a seen that matches
// was stored after its value, so the value loaded after it is that one
// or a later one, and was read after the update.
func (l *coarseLine) current() int64 {
	seen := atomic.LoadUint64(&l.seen)
	v := atomic.LoadInt64(&l.value)
	if seen != l.tick.Load().Stamp() {
		return 0
	}
	return v
}

// kernelTicks is the kernel's vDSO time data where it was found and
// proven live, nil elsewhere, looked for once per process by the first
// Coarse ticker (off the caller's path: it reads /proc/self/maps). The
// kernel rewrites it at every timekeeping update, once per tick of the
// CPUs that tick (1/CONFIG_HZ: 1 to 10 ms): a Coarse value read before
// the last update is read afresh, so that a goroutine that holds every
// P (GOMAXPROCS=1, a spinner), which the ticker cannot interrupt until
// the scheduler preempts it 10 to 40 ms later, sees Coarse no older than
// one kernel tick all the same. Clocks whose resolution is
// kernelTickMax or coarser keep to their ticker. Where in it the coarse
// base lies is for KernelTime, which finds the conversion around it
// (ktime_exact.go).
var kernelTicks = lazy[kernelTimeData]{make: func() kernelTimeData {
	maps, err := pvclock.Maps()
	if err != nil {
		return kernelTimeData{}
	}
	td, coarse, _ := pvclock.ProbeTimeData(maps)
	return kernelTimeData{td, coarse}
}}

// kernelTimeData is the vDSO's time data and the offset of its coarse
// base.
type kernelTimeData struct {
	td     *pvclock.TimeData
	coarse int
}

// kernelTickMax is the longest kernel tick (CONFIG_HZ=100).
const kernelTickMax = 10 * time.Millisecond

// Coarse returns the clock's time, an Instant, at its coarse resolution
// (1 ms unless WithCoarseResolution says otherwise), with one call and
// three loads: for rate limiters, caches and timeouts, which need
// time often and precisely only to the millisecond.
//
// The value is a reading of Now taken by the first Coarse after each tick
// of a goroutine of the clock's, which clears it at every tick; so
// Coarse writes shared memory at most once per tick. The goroutine starts
// at the first Coarse, and a reading is no older than one resolution
// plus how late that goroutine runs, which the Go scheduler and the OS
// decide. On Linux, for resolutions under 10 ms, a reading is also no
// older than the kernel's last timekeeping update (CLOCK_MONOTONIC_COARSE,
// one kernel tick: 4 ms at CONFIG_HZ=250), which Coarse sees in the
// vDSO's time data: so a goroutine that holds every P (GOMAXPROCS=1),
// which the ticker cannot interrupt, still sees Coarse within a kernel
// tick. The repository's docs/benchmarks.md has the figures and the
// commands that measure them.
// The goroutine runs only while Coarse is being read: after 3 ticks
// without a read it stops, and the next Coarse
// reads Now itself (so its value is current) and has the clock's
// goroutine start it again.
//
// Coarse never runs ahead of Now: a Now that starts after Coarse returned
// returns at least as much. It never goes backwards, across Suspend,
// Register, re-anchoring and the goroutine's stops included, since it
// only ever holds readings of Now taken after the last one was cleared.
// On a clock on a schedclocktest.Manual counter or a Bubble Source, Coarse is Now, with
// no goroutine: exact at once after Advance and Set, and in a
// testing/synctest bubble equal to Now whenever the bubble's time has
// moved (at Now's cost). After Close, Coarse stands still.
//
// Coarse is never inlined, so that a goroutine spinning on it can be
// preempted (see the package-level Coarse; today the method is over the
// inliner's budget anyway).
//
//go:noinline
func (c *Clock) Coarse() Instant {
	if c == nil {
		c = defaultClock
	}
	if v := c.coarse.current(); v != 0 {
		return Instant(v - 1)
	}
	return Instant(c.coarseSlow())
}

// coarseIdleTicks is how many ticks without a Coarse stop the goroutine:
// each tick is a wake-up (CPU: docs/default-clock.md), and after
// the last read every one is waste; a reader that pauses longer pays a
// restart (its Coarse reads Now and has the goroutine started again).
const coarseIdleTicks = 3

// coarseSlow is Coarse after a tick cleared the value: it reads Now,
// stores it unless another goroutine stored one first, and makes sure the
// ticking goroutine runs.
func (c *Clock) coarseSlow() int64 {
	if c.st == nil {
		return int64(defaultClock.Coarse()) // a zero Clock
	}
	if c.st.exact.coarse.Load() {
		return c.nanos()
	}
	c.wakeFirstUse()
	if !c.st.policy.started() {
		// No goroutine will clear a stored value (a first use inside a
		// testing/synctest bubble starts none): read Now each time.
		return c.nanos()
	}
	for {
		if v := c.coarse.current(); v != 0 {
			return v - 1 // another goroutine's reading, taken after the same clear and update
		}
		stamp := c.coarse.tick.Load().Stamp()
		old := atomic.LoadInt64(&c.coarse.value)
		now := min(c.nanos(), math.MaxInt64-1)
		if !atomic.CompareAndSwapInt64(&c.coarse.value, old, now+1) {
			continue // another goroutine stored one, or a tick cleared it, in between
		}
		atomic.StoreUint64(&c.coarse.seen, stamp)
		if !c.st.ticker.running.Load() && c.st.ticker.running.CompareAndSwap(false, true) {
			// The clock's own goroutine starts the ticker: a goroutine
			// started here would join the caller's synctest bubble.
			c.st.ticker.wanted.Store(&startTicker)
			c.kick()
		}
		return now
	}
}

// startCoarse starts the ticking goroutine if Coarse asked for it. Only
// the clock's own goroutines call it (one started by Coarse's caller would
// join its synctest bubble), and they do so before Close has waited for
// them, so ticker.wg.Add comes before Close's Wait. They call it as soon as
// they are woken, before any other work: until the ticker runs, the value
// the first Coarse stored is not refreshed.
func startCoarse(w clockRef, st *clockState) {
	if start := st.ticker.wanted.Swap(nil); start != nil {
		(*start)(w, st)
	}
}

// startTicker is what Coarse asks startCoarse to run.
var startTicker = func(w clockRef, st *clockState) {
	select {
	case <-st.loop.stop:
		return
	default:
	}
	st.ticker.wg.Add(1)
	go tickCoarse(w, st, st.ticker.every)
}

// tickCoarse clears the coarse value at every tick, and when it starts if
// the value is already a resolution old; it stops after coarseIdleTicks
// ticks that found it not read since the last. The clear at the start
// matters where the reader holds the only P (GOMAXPROCS=1): the goroutine
// first runs when the reader is preempted, a whole time slice after the
// value was stored, and the reader must find it cleared when it runs
// again, not a period later, another slice on.
// Stopping and Coarse's start race safely: the goroutine marks itself
// stopped and then looks at the value, Coarse stores the value and then
// looks at the mark, so at least one of them sees the other (sequentially
// consistent atomics), and a stored value is never left uncleared. It
// holds the Clock weakly, as the background goroutine does, and stops
// when nothing else holds it.
func tickCoarse(w clockRef, st *clockState, every time.Duration) {
	defer st.ticker.wg.Done()
	if every < kernelTickMax {
		// Beside the ticker, not before it: the look reads
		// /proc/self/maps (under an emulator, translating its code first
		// takes tens of milliseconds), and the ticker's first clear must
		// not wait for it. Close waits for it as for the ticker.
		st.ticker.wg.Add(1)
		go func() {
			defer st.ticker.wg.Done()
			if td := kernelTicks.get().td; td != nil {
				if c := clockOf(w); c != nil {
					c.coarse.tick.Store(td)
				}
			}
		}()
	}
	ticker := newWakeTimer(every) // re-armed at each tick (see wakeTimer)
	defer ticker.Stop()
	if c := clockOf(w); c != nil {
		if v := atomic.LoadInt64(&c.coarse.value); v != 0 && c.nanos()-(v-1) >= int64(every) {
			atomic.CompareAndSwapInt64(&c.coarse.value, v, 0)
		}
	}
	idle := 0
	for {
		select {
		case <-st.loop.stop:
			return
		case <-ticker.C:
			ticker.Reset(every)
		}
		c := clockOf(w)
		if c == nil {
			return
		}
		if atomic.SwapInt64(&c.coarse.value, 0) != 0 {
			idle = 0
			continue
		}
		if idle++; idle < coarseIdleTicks {
			continue
		}
		st.ticker.running.Store(false)
		if atomic.LoadInt64(&c.coarse.value) == 0 || !st.ticker.running.CompareAndSwap(false, true) {
			return
		}
		idle = 0 // read just now: go on ticking
	}
}

// Coarse returns the default clock's coarse time (Default().Coarse()):
// an Instant about a millisecond old at most, read with one call and
// three loads, for deadlines, caches and rate limits that read the time
// often and need it only to the millisecond. It never runs ahead of Now
// and never goes backwards; Clock.Coarse says how old it can be and why.
//
//go:noinline
func Coarse() Instant {
	// Coarse, and Clock.Coarse, are never inlined: a call to them is where
	// a goroutine that spins on Coarse can be preempted. The Go scheduler
	// preempts a goroutine that ran 10 ms by a signal, which takes effect
	// only where it lands in Go code, or at the next function prologue. A
	// loop of an inlined Coarse and a Now (assembly on amd64, where no
	// signal preempts) spent nearly all its time in the assembly: at
	// GOMAXPROCS=1 it ran hundreds of milliseconds between preemptions,
	// and Coarse's ticker, which needs the P, waited all that time (a
	// probe ticker beside it ran 5-11 times in 3 s, 92-125 times beside a
	// plain Go loop). The call costs about a nanosecond; the function is a
	// leaf but for its slow path's call, so it keeps its stack check, the
	// prologue that preempts.
	if v := defaultClock.coarse.current(); v != 0 {
		return Instant(v - 1)
	}
	return Instant(defaultClock.coarseSlow())
}
