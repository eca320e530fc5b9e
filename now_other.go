//go:build !amd64 || !gc || purego

package schedclock

// Now returns the clock's time: nanoseconds since the clock was made.
// It never waits for a writer, never allocates, and never returns less
// than a call that happened before it, given a counter that is monotonic
// across CPUs and, for a counter narrower than 64 bits, a clock whose
// goroutine runs at least once per refresh period (see Source on when it
// cannot).
func (c *Clock) Now() Instant {
	if c == nil {
		c = defaultClock // see Clock
	}
	return Instant(otherNow(c))
}

// nanos is Now as the int64 the writer side computes with.
func (c *Clock) nanos() int64 {
	if c == nil {
		c = defaultClock
	}
	return otherNow(c)
}
