package schedclock

import (
	"math"
	"time"
)

// An Instant is a reading of a Clock: nanoseconds on that clock's
// timeline, which starts near 0 when the clock is made (New) and, for
// the default clock, when the package is initialised. Instants of one
// Clock compare with < and ==, and subtract with Sub; an Instant of one
// Clock means nothing to another, and it is not a wall-clock time
// (Clock.WallTime maps it to one). A Unix time or a plain integer
// becomes an Instant only by an explicit conversion.
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
