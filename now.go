package schedclock

import (
	"math"
	"sync/atomic"
	"time"
)

// The read path: Now and its helpers. Every reader follows the latch's
// protocol (latch.go); they differ only in how they read the counter.
// On amd64 Now is clockNow, in assembly, which reads the TSC itself and
// hands every other bank over to otherNow (now_amd64.s); elsewhere Now is
// otherNow.
//
// Now never waits for a writer, never allocates, and never returns less
// than a call that happened before it, given a counter that is monotonic
// across CPUs and, for a counter narrower than 64 bits, a refresh
// goroutine that runs within its refresh period (a wrap that nothing
// folded in time is lost, as in the kernel; see Source for what the next
// fold does about it).

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
		cyc := uint64(runtimeNano())
		orderAfter(cyc)
		scale := b.scale.Load()
		ns, fast := b.fastNanos(cyc, scale)
		if !fast {
			ns = b.slowNanos(cyc, scale)
		}
		next := c.latch.seq.Load()
		if next == seq {
			return ns
		}
		seq = next
	}
}

// Since returns the time elapsed since start, an Instant this clock's
// Now or Coarse returned: Now() - start, saturated so that it is never
// negative (a start later than now gives 0) and never wraps. A start
// read from another Clock is not detected: the result is then a
// meaningless, though never negative, duration, since each Clock counts
// from its own origin.
func (c *Clock) Since(start Instant) time.Duration {
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
			return defaultClock.nanos() // a zero Clock: see Clock
		}
		cyc := ptrFunc(read)()
		scale := b.scale.Load()
		ns, fast := b.fastNanos(cyc, scale)
		if !fast {
			ns = b.slowNanos(cyc, scale)
		}
		if c.latch.seq.Load() == seq {
			return ns
		}
	}
}

// An Instant is a reading of a Clock: nanoseconds on that clock's
// timeline, which starts near 0 when the clock is made (New) and, for
// the default clock, when the package is initialised. An Instant of one
// Clock means nothing to another, and it is not a wall-clock time
// (Clock.WallTime maps it to one). A Unix time or a plain integer
// becomes an Instant only by an explicit conversion.
//
// Instants of one Clock compare with Before and After (or <, ==, >:
// an Instant is an integer, and a comparison one instruction), and
// subtract with Sub, which returns a time.Duration. Go lets a-b of two
// Instants compile, and its result is an Instant, not a duration: use
// Sub. An Instant prints (String, %v, %s) as the time since its clock's
// start. It has no IsZero: 0 is a real reading (a clock's first Now can
// return it, a manual clock's does), so no value can mean "never set".
type Instant int64

// Sub returns the duration t-u, saturated to the range of a
// time.Duration (as time.Time's Sub is); it is negative when u is later
// than t.
func (t Instant) Sub(u Instant) time.Duration {
	d := int64(t) - int64(u)
	// Overflow happened if the operands' signs differ and the result's
	// sign differs from t's.
	if (t >= 0) != (u >= 0) && (d >= 0) != (t >= 0) {
		if t >= 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return time.Duration(d)
}

// Before reports whether t is earlier than u.
func (t Instant) Before(u Instant) bool { return t < u }

// After reports whether t is later than u.
func (t Instant) After(u Instant) bool { return t > u }

// String returns the time since the clock's start that t is, as
// time.Duration's String writes it: "1.234567891s", "-2ms".
func (t Instant) String() string { return time.Duration(t).String() }

// Add returns the instant t+d, saturated to the range of an Instant
// rather than wrapping, as Since saturates.
func (t Instant) Add(d time.Duration) Instant {
	s := int64(t) + int64(d)
	if d > 0 && s < int64(t) {
		return math.MaxInt64
	}
	if d < 0 && s > int64(t) {
		return math.MinInt64
	}
	return Instant(s)
}
