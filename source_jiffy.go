package schedclock

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Jiffies is a coarse counter advanced by a ticker at HZ, the kernel's
// boot-time sched_clock (jiffy_sched_clock_read). It is ready at once and
// works everywhere, but it only moves at each tick, so a Clock on it
// advances in steps of 1/HZ. Each tick sets the count from Go's monotonic
// clock, so ticks that the runtime drops or delays lose no time.
//
// A nil *Jiffies, like a nil *Clock, panics in no method: Read reads 0,
// Stop does nothing, and New refuses its Source with ErrInvalidSource.
type Jiffies struct {
	count atomic.Uint64
	hz    uint64
	start time.Time
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
}

// MaxHZ is the highest tick rate NewJiffies accepts.
const MaxHZ = 100_000

// NewJiffies starts a jiffy counter ticking at hz (1..MaxHZ) on a
// goroutine of its own. Stop it with Stop when it is no longer used. A
// rate outside 1..MaxHZ is refused with an error wrapping
// ErrInvalidSource that quotes it.
func NewJiffies(hz int) (*Jiffies, error) {
	if hz < 1 || hz > MaxHZ {
		return nil, fmt.Errorf("%w %q: HZ = %d, want 1..%d", ErrInvalidSource, "jiffies", hz, MaxHZ)
	}
	j := &Jiffies{hz: uint64(hz), start: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	go j.tick()
	return j, nil
}

func (j *Jiffies) tick() {
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
func (j *Jiffies) Read() uint64 {
	if j == nil {
		return 0
	}
	return j.count.Load()
}

// Source returns the counter as a Source: 64 bits at HZ.
func (j *Jiffies) Source() Source {
	if j == nil {
		return Source{Name: "jiffies (a nil *Jiffies)"} // no Read: New refuses it
	}
	return Source{Name: "jiffies", Read: j.Read, Bits: 64, Rate: j.hz}
}

// Stop stops the ticker and waits for its goroutine to exit; the count
// stays where it is. Stop is idempotent, and does nothing on a zero or
// nil Jiffies.
func (j *Jiffies) Stop() {
	if j == nil || j.stop == nil {
		return // never started by NewJiffies
	}
	j.once.Do(func() { close(j.stop) })
	<-j.done
}
