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
// a reading of Now plus one, 0 until Coarse is first called (so a coarse
// reading saturates at math.MaxInt64-1 ns).
type coarseLine struct {
	value int64 // accessed atomically only (a plain int64 keeps Coarse inlinable)
	_     [56]byte
}

// Coarse returns the clock's time in nanoseconds at its coarse resolution
// (1 ms unless WithCoarseResolution says otherwise): a value that a
// goroutine of the clock's brings up to date at every tick, read with a
// single atomic load. It is for rate limiters, caches and timeouts, which
// need time often and precisely only to the millisecond.
//
// Coarse never runs ahead of Now: a Now that starts after Coarse returned
// returns at least as much. It never goes backwards, across Suspend,
// Register and re-anchoring included, since it only ever holds readings
// of Now. It lags Now by up to the resolution, more when the Go scheduler
// runs the ticking goroutine late.
//
// The first call starts that goroutine (a clock nobody asks for coarse
// time wakes nobody), and reads Now itself, so the first value is already
// current. After Close, Coarse stands still.
func (c *Clock) Coarse() int64 {
	if v := atomic.LoadInt64(&c.coarse.value); v != 0 {
		return v - 1
	}
	return c.startCoarse()
}

// startCoarse is Coarse's first call: it brings the value up to date and
// starts the goroutine that keeps it so.
func (c *Clock) startCoarse() int64 {
	if c.clockState == nil {
		return 0 // a zero Clock
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v := atomic.LoadInt64(&c.coarse.value); v != 0 {
		return v - 1 // another goroutine started it
	}
	now := c.storeCoarse()
	if !c.stoppedLocked() {
		c.coarseStop, c.coarseDone = make(chan struct{}), make(chan struct{})
		go c.tickCoarse(c.coarseEvery, c.coarseStop, c.coarseDone)
	}
	return now
}

// storeCoarse reads Now and stores it as the coarse value.
func (c *Clock) storeCoarse() int64 {
	now := min(c.Now(), math.MaxInt64-1)
	atomic.StoreInt64(&c.coarse.value, now+1)
	return now
}

func (c *Clock) tickCoarse(every time.Duration, stop, stopped chan struct{}) {
	defer close(stopped)
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ticker.C:
			c.storeCoarse()
		}
	}
}

// stopCoarseLocked stops the coarse goroutine, if it runs, and returns a
// channel closed once it has exited.
func (c *Clock) stopCoarseLocked() <-chan struct{} {
	if c.coarseStop == nil {
		done := make(chan struct{})
		close(done)
		return done
	}
	close(c.coarseStop)
	c.coarseStop = nil
	return c.coarseDone
}

// Coarse returns the default clock's coarse time: Default().Coarse(),
// spelled out so that the inliner takes it whole.
func Coarse() int64 {
	if v := atomic.LoadInt64(&defaultClock.coarse.value); v != 0 {
		return v - 1
	}
	return defaultClock.startCoarse()
}
