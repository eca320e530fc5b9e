package schedclock

import (
	"math"
	"sync/atomic"
	"time"
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
// reading saturates at math.MaxInt64-1 ns).
type coarseLine struct {
	value int64 // accessed atomically only (a plain int64 keeps Coarse inlinable)
	_     [56]byte
}

// Coarse returns the clock's time in nanoseconds at its coarse resolution
// (1 ms unless WithCoarseResolution says otherwise), with a single atomic
// load: for rate limiters, caches and timeouts, which need time often and
// precisely only to the millisecond.
//
// The value is a reading of Now taken by the first Coarse after each tick
// of a goroutine of the clock's, which clears it at every tick; so
// Coarse writes shared memory at most once per tick, and a reading is no
// older than one resolution plus how late the Go scheduler runs that
// goroutine. There is no fixed bound: the goroutine needs a CPU, and a
// loaded machine makes it late. Measured by TestCoarseStaleness (a busy
// reader, one Coarse every 50µs) on a 2-vCPU AMD EPYC KVM guest (Go
// 1.26.8): at a load average of 3.4 the median reading was 0.55-0.65 ms
// old, p99 1.2-79 ms, the worst 6.4-92 ms; at 4.5-5.4 (four CPU-bound
// processes beside it), median 0.9-1.6 ms, p99 36-117 ms, the worst
// 94-140 ms (see the package doc, "Coarse time").
// The goroutine runs only while Coarse is being read: after
// coarseIdleTicks (3) ticks without a read it stops, and the next Coarse
// reads Now itself (so its value is current) and has the clock's
// goroutine start it again.
//
// Coarse never runs ahead of Now: a Now that starts after Coarse returned
// returns at least as much. It never goes backwards, across Suspend,
// Register, re-anchoring and the goroutine's stops included, since it
// only ever holds readings of Now taken after the last one was cleared.
// On a clock on a Manual counter, Coarse is Now: exact at once after
// Advance and Set. After Close, Coarse stands still.
func (c *Clock) Coarse() int64 {
	if c == nil {
		return 0
	}
	if v := atomic.LoadInt64(&c.coarse.value); v != 0 {
		return v - 1
	}
	return c.coarseSlow()
}

// coarseIdleTicks is how many ticks without a Coarse stop the goroutine:
// each tick is a wake-up (about 250µs of CPU in a KVM guest), and after
// the last read every one is waste; a reader that pauses longer pays a
// restart (its Coarse reads Now and has the goroutine started again).
const coarseIdleTicks = 3

// coarseSlow is Coarse after a tick cleared the value: it reads Now,
// stores it unless another goroutine stored one first, and makes sure the
// ticking goroutine runs.
func (c *Clock) coarseSlow() int64 {
	if c.clockState == nil {
		return 0 // a zero Clock
	}
	if c.manual.Load() != nil {
		return c.Now()
	}
	c.wakeFirstUse()
	if !c.policy.started() {
		// No goroutine will clear a stored value (a first use inside a
		// testing/synctest bubble starts none): read Now each time.
		return c.Now()
	}
	for {
		now := min(c.Now(), math.MaxInt64-1)
		if !atomic.CompareAndSwapInt64(&c.coarse.value, 0, now+1) {
			if v := atomic.LoadInt64(&c.coarse.value); v != 0 {
				return v - 1 // another goroutine's reading, taken after the same clear
			}
			continue // cleared again in between
		}
		if !c.coarseRunning.Load() && c.coarseRunning.CompareAndSwap(false, true) {
			// The clock's own goroutine starts the ticker: a goroutine
			// started here would join the caller's synctest bubble.
			c.coarseWanted.Store(true)
			c.kick()
		}
		return now
	}
}

// startCoarseLocked starts the ticking goroutine if Coarse asked for it.
// The clock's background goroutine calls it.
func (c *Clock) startCoarseLocked() {
	if c.coarseWanted.Swap(false) && !c.stoppedLocked() {
		c.coarseWG.Add(1)
		go tickCoarse(weakClock(c), c.clockState, c.coarseEvery)
	}
}

// tickCoarse clears the coarse value at every tick, and stops after
// coarseIdleTicks ticks that found it not read since the last. Stopping
// and Coarse's start race safely: the goroutine marks itself stopped and
// then looks at the value, Coarse stores the value and then looks at the
// mark, so at least one of them sees the other (sequentially consistent
// atomics), and a stored value is never left uncleared. It holds the
// Clock weakly, as the background goroutine does, and stops when nothing
// else holds it.
func tickCoarse(w clockRef, st *clockState, every time.Duration) {
	defer st.coarseWG.Done()
	ticker := newWakeTimer(every) // re-armed at each tick (see wakeTimer)
	defer ticker.Stop()
	idle := 0
	for {
		select {
		case <-st.stop:
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
		st.coarseRunning.Store(false)
		if atomic.LoadInt64(&c.coarse.value) == 0 || !st.coarseRunning.CompareAndSwap(false, true) {
			return
		}
		idle = 0 // read just now: go on ticking
	}
}

// Coarse returns the default clock's coarse time: Default().Coarse(),
// spelled out so that the inliner takes it whole.
func Coarse() int64 {
	if v := atomic.LoadInt64(&defaultClock.coarse.value); v != 0 {
		return v - 1
	}
	return defaultClock.coarseSlow()
}
