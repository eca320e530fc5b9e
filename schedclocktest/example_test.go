package schedclocktest_test

import (
	"fmt"
	"time"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/schedclocktest"
)

// A Manual counter makes a Clock that tests drive by hand, with no sleep.
func ExampleNewManual() {
	m, _ := schedclocktest.NewManual(1e9, 64)
	c, _ := schedclock.New(m.Source())
	defer c.Close()
	start := c.Now()
	m.Advance(90 * time.Second)
	fmt.Println(c.Since(start))
	// Output: 1m30s
}

// limiter allows one event per interval, reading its time from the
// *Clock it is given: the way code that reads schedclock stays testable.
type limiter struct {
	clock    *schedclock.Clock
	interval time.Duration
	last     schedclock.Instant
}

func (l *limiter) Allow() bool {
	now := l.clock.Coarse()
	if l.last != 0 && now.Sub(l.last) < l.interval {
		return false
	}
	l.last = now
	return true
}

// Testing code that reads the clock: in a test, pass the testing.T (or
// the synctest bubble's) instead of nil, and the clock is closed at the
// test's end. Every answer follows Advance at once, Coarse included, and
// Time maps through a fixed wall origin.
func ExampleNewManualClock() {
	c, m := schedclocktest.NewManualClock(nil)
	defer c.Close()
	l := &limiter{clock: c, interval: time.Second}
	m.Advance(time.Millisecond)
	fmt.Println(l.Allow(), l.Allow())
	m.Advance(time.Second)
	fmt.Println(l.Allow())
	fmt.Println(c.WallTime(c.Now()).UTC().Format(time.RFC3339Nano))
	// Output:
	// true false
	// true
	// 2000-01-01T00:00:01.001Z
}
