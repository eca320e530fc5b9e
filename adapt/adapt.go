// Package adapt plugs a schedclock Clock into the clock interfaces that
// services already take, with no dependency on the libraries that
// declare them: a Clock has the methods of zap's zapcore.Clock (Now,
// NewTicker) and of the Kubernetes utils' clock.PassiveClock (Now,
// Since), and deadlines on the clock's Instants (Deadline, Until).
//
//	logger := zap.New(core, zap.WithClock(adapt.Clock{}))    // entries stamped with schedclock.WallNow
//	var pc clock.PassiveClock = adapt.On(myClock)             // k8s.io/utils/clock
//
// Now is the wall time read from the counter (schedclock.WallNow, or
// Clock.WallTime of the clock's Now): cheaper than time.Now, and without
// a monotonic reading, so durations between two Nows are wall-clock
// differences. To measure time, use the Instants (Deadline, Until, or
// schedclock.Now and Since); a context that ends at a deadline is the
// Clock's WithDeadline.
package adapt

import (
	"time"

	"github.com/schedclock/schedclock"
)

// Clock is a schedclock Clock seen through the usual clock interfaces.
// The zero Clock reads the default clock (schedclock.Default()), as a
// nil *schedclock.Clock does; On gives one on any other. A Clock is a
// small value: copy it freely.
type Clock struct {
	clock *schedclock.Clock
}

// On returns a Clock that reads c; a nil c is the default clock.
func On(c *schedclock.Clock) Clock { return Clock{clock: c} }

// Now returns the clock's current time as wall-clock time: the wall time
// of the clock's Now (for the default clock, schedclock.WallNow). It has
// no monotonic reading.
func (a Clock) Now() time.Time {
	return a.clock.WallTime(a.clock.Now())
}

// Since returns the time elapsed since t on the clock's wall time:
// Now().Sub(t), as time.Since(t) for a t without a monotonic reading.
func (a Clock) Since(t time.Time) time.Duration { return a.Now().Sub(t) }

// NewTicker returns time.NewTicker(d): the clock measures time, it does
// not wait for it, so tickers and timers stay the time package's (and a
// testing/synctest bubble's fake time drives them there).
func (a Clock) NewTicker(d time.Duration) *time.Ticker { return time.NewTicker(d) }

// Deadline returns the Instant d from now on the clock: c.Now().Add(d),
// saturated. Compare it with the clock's Now or Coarse, pass it to
// Until, or make a context that ends at it with c.WithDeadline.
func (a Clock) Deadline(d time.Duration) schedclock.Instant { return a.clock.Now().Add(d) }

// Until returns the time left until deadline on the clock, c.Until:
// negative once it has passed, as time.Until.
func (a Clock) Until(deadline schedclock.Instant) time.Duration { return a.clock.Until(deadline) }
