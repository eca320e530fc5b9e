//go:build gc && !purego

package schedclock

import "github.com/schedclock/schedclock/internal/hwcounter"

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
	return Instant(clockNow(c))
}

// nanos is Now as the int64 the writer side computes with. On amd64 the
// read is assembly (clockNow); both wrappers inline into their callers.
func (c *Clock) nanos() int64 {
	if c == nil {
		c = defaultClock
	}
	return clockNow(c)
}

// clockNow is Clock.Now in assembly; see now_amd64.s.
//
//go:noescape
func clockNow(c *Clock) int64

// genericNow is the generic reader, for clockNow to hand over to.
//
//lint:ignore U1000 called by clockNow in now_amd64.s
func genericNow(c *Clock) int64 { return c.now() }

// tscReadPtr identifies readTSC in a bank's read field; Clock.Now
// compares against it.
//
//lint:ignore U1000 read by Clock.Now in now_amd64.s
var tscReadPtr = funcPtr(hwcounter.TSC())

// pvclockReadPtr identifies readPvclock in a bank's read field: Clock.Now
// inlines that page read (now_amd64.s).
//
//lint:ignore U1000 read by Clock.Now in now_amd64.s
var pvclockReadPtr = funcPtr(readPvclock)
