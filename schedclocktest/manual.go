package schedclocktest

import (
	"time"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/internal/testhook"
)

// Manual is a counter that moves only when told to. NewManualClock makes
// one and a Clock on it in one call; hand the Clock to the code under test
// and Advance the counter:
//
//	c, m := schedclocktest.NewManualClock(t) // closed when the test ends
//	start := c.Now()
//	m.Advance(1500 * time.Millisecond)
//	// c.Since(start) == 1500 * time.Millisecond, exactly
//
// A Clock on a Manual counter is exact and deterministic in all it
// answers: Now and Since move only by Advance and Set; Coarse equals Now
// at once; WallTime maps a reading through the wall origin (SetWallOrigin;
// 2000-01-01 00:00:00 UTC unless set), never through the real wall clock,
// so WallTime(Now()) moves exactly by what Advance moved. A Manual is safe
// for concurrent use.
//
// Timers, Sleep and deadlines are not schedclock's business: for code
// that sleeps or waits, run the test in a testing/synctest bubble, whose
// fake time moves when every goroutine is blocked, with NewBubbleClock.
//
// A nil *Manual panics in no method: Read reads 0, Advance, Set and
// SetWallOrigin do nothing, and schedclock.New refuses its Source with
// schedclock.ErrInvalidSource.
type Manual struct {
	counter testhook.Manual
}

// NewManual returns a counter at 0 that counts at rate Hz when advanced,
// bits wide. It refuses, with an error wrapping
// schedclock.ErrInvalidSource, what schedclock.New would refuse of its
// Source: a rate of 0, a width outside 1..64, or a counter that wraps too
// fast to be followed (under 667 ms a wrap). It panics outside a test
// (see the package doc).
func NewManual(rate uint64, bits int) (*Manual, error) {
	refuseOutsideATest("NewManual")
	m, err := testhook.NewManual(rate, bits)
	if err != nil {
		return nil, err
	}
	return &Manual{counter: m}, nil
}

// Advance moves the counter on by d: d times its rate, in counts, the
// fractions of a count carried to the next Advance. A negative d does
// nothing (use Set to move the counter back). It never moves the counter
// back: a 64-bit counter stops 1/8 of its range below the top (where a
// Clock would take it for a counter that stepped back). A narrower
// counter wraps, as often as d says, and Advance folds every running
// Clock on it across the move, exactly (NewManual(1e9, 32) advanced by a
// second ten times reads 10 s later, not 10 s modulo 4.29 s). A Clock
// that is suspended or closed does not follow the counter.
func (m *Manual) Advance(d time.Duration) {
	if m != nil {
		m.counter.Advance(int64(d))
	}
}

// Set sets the counter to v (masked to its width when read): a counter
// that jumps, steps back or wraps, for testing how code copes.
func (m *Manual) Set(v uint64) {
	if m != nil {
		m.counter.Set(v)
	}
}

// Read returns the counter, masked to its width.
func (m *Manual) Read() uint64 {
	if m == nil {
		return 0
	}
	return m.counter.Read()
}

// SetWallOrigin sets the wall time that a Clock on this counter maps the
// Instant 0 to: WallTime(t0) is t plus t0 nanoseconds, saturated to what
// time.Unix(0, ns) can say (1677-09-21 to 2262-04-11). An origin outside
// that range is kept as it is, not clamped: WallTime(0) of the origin
// time.Time{} is the earliest time.Unix(0, ns) can say, and an origin in
// 1600 with a reading of 100 years is 1700.
func (m *Manual) SetWallOrigin(t time.Time) {
	if m != nil {
		m.counter.SetWallOrigin(t.Unix(), int64(t.Nanosecond()))
	}
}

// Source returns the counter as a schedclock.Source named "manual", for
// schedclock.New or Clock.Register. A Clock on it knows it for a Manual
// (see Manual on Coarse and WallTime).
func (m *Manual) Source() schedclock.Source {
	if m == nil {
		return schedclock.Source{Name: "manual (a nil *Manual)"} // no Read: New refuses it
	}
	return m.counter.Source().(schedclock.Source)
}
