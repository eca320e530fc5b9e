package integrations

import (
	"time"

	"github.com/schedclock/schedclock"
	"golang.org/x/time/rate"
)

// Limiter is a golang.org/x/time/rate token bucket that takes its time
// from a schedclock.Clock: schedclock.Default() in production, a Clock
// on a schedclocktest.Manual counter in tests, which then refill the bucket
// exactly, by Manual.Advance, without sleeping.
//
// rate.Limiter only subtracts and adds the times it is given, so any one
// timeline will do; the readings go in as time.Unix(0, ns). Never mix in
// the rate.Limiter methods that read time.Now themselves (Allow, Wait,
// Reserve, Tokens, SetLimit): the two timelines are decades apart. That
// is why the rate.Limiter is not exported here.
type Limiter struct {
	clock *schedclock.Clock
	lim   *rate.Limiter
}

// NewLimiter returns a Limiter on clock that allows events at limit per
// second, in bursts of up to burst.
func NewLimiter(clock *schedclock.Clock, limit rate.Limit, burst int) *Limiter {
	return &Limiter{clock: clock, lim: rate.NewLimiter(limit, burst)}
}

// Allow reports whether one event may happen now, and takes its token if
// so.
func (l *Limiter) Allow() bool {
	return l.lim.AllowN(time.Unix(0, int64(l.clock.Now())), 1)
}

// AllowCoarse is Allow on the clock's coarse reading: a few loads
// instead of a counter read, the bucket refilled in steps of the clock's
// coarse resolution (1 ms by default), so a limit of r per second lets
// tokens in by up to r/1000 at a time.
func (l *Limiter) AllowCoarse() bool {
	return l.lim.AllowN(time.Unix(0, int64(l.clock.Coarse())), 1)
}
