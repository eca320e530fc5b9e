// Package schedclocktest provides clocks for testing code that reads a
// *schedclock.Clock, as net/http/httptest does for HTTP handlers.
//
// Code whose behaviour depends on time should take a *schedclock.Clock
// rather than read the package-level schedclock.Now, and its tests give
// it one of these:
//
//   - NewManualClock: a Clock on a Manual counter, which moves only when
//     the test says (Advance, Set). Everything the Clock answers is exact
//     and deterministic, with no sleeping.
//   - NewBubbleClock: a Clock that follows a testing/synctest bubble's
//     fake time, for code that also sleeps or waits on timers.
//
// Both are closed when the test ends.
//
// It is for tests only: it links the testing package into what imports
// it (some 200 KB), and its constructors panic outside a test binary
// (where testing.Testing reports false), so that a program never runs on
// a manual clock by mistake. Code that takes a *schedclock.Clock reads
// the default clock outside its tests when given nil.
package schedclocktest

import (
	"testing"

	"github.com/schedclock/schedclock"
)

// NewManualClock returns a Clock on a new 1 GHz, 64-bit Manual counter,
// reading 0, and the counter; the Clock is closed when tb's test ends
// (given a nil tb, closing it is the caller's). It works inside a
// testing/synctest bubble too: the Clock's goroutine joins the bubble,
// and its Close, at the test's cleanup, lets the bubble end. It panics
// outside a test (see the package doc).
func NewManualClock(tb testing.TB) (*schedclock.Clock, *Manual) {
	refuseOutsideATest("NewManualClock")
	m, err := NewManual(1_000_000_000, 64)
	var c *schedclock.Clock
	if err == nil {
		c, err = schedclock.New(m.Source())
	}
	if err != nil {
		panic("schedclocktest: a 1 GHz 64-bit Manual is refused: " + err.Error()) // cannot happen
	}
	if tb != nil {
		tb.Cleanup(func() { _ = c.Close() })
	}
	return c, m
}

// NewBubbleClock returns a Clock on schedclock.Bubble(), the Source that
// reads the time package's clock: called inside a testing/synctest
// bubble, the Clock follows the bubble's fake time, which moves only
// when every goroutine of the bubble is blocked, and its WallTime is the
// bubble's time.Now. The Clock is closed when tb's test ends, inside the
// bubble, so that the bubble can end. Call it inside the bubble, with the
// bubble's *testing.T. It panics outside a test (see the package doc).
//
// The package-level schedclock.Now, and every Clock on another Source,
// read the machine's counter and see only the real time that passed: the
// code under test must read the Clock it is given.
func NewBubbleClock(tb testing.TB) *schedclock.Clock {
	refuseOutsideATest("NewBubbleClock")
	tb.Helper()
	c, err := schedclock.New(schedclock.Bubble())
	if err != nil {
		tb.Fatalf("schedclocktest: a Clock on Bubble is refused: %v", err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// refuseOutsideATest panics unless a test binary is running: a clock of
// this package in a program is a mistake that no error return would
// stop (see the package doc).
func refuseOutsideATest(ctor string) {
	if !testing.Testing() {
		panic("schedclocktest." + ctor + " called outside a test: the package is for tests (go test) only")
	}
}
