package schedclock

import "time"

// Bubble returns a Source that reads the time package's clock: the
// monotonic reading of time.Now, at 1 GHz, 64 bits. Inside a
// testing/synctest bubble that is the bubble's fake time, which moves
// only when every goroutine of the bubble is blocked (time.Sleep(time.Hour)
// returns at once with the clock an hour on): a Clock made on it there
// follows the bubble, as the code under test's timers and sleeps do, where
// the default clock and every other Source read the machine's counter and
// see only the real time that passed.
//
//	synctest.Test(t, func(t *testing.T) {
//		c, _ := schedclock.New(schedclock.Bubble())
//		defer c.Close() // inside the bubble, so that it can end
//		start := c.Now()
//		time.Sleep(time.Minute)
//		// c.Since(start) == time.Minute, exactly
//	})
//
// schedclocktest.NewBubbleClock(t) does the first two lines, the Close
// at the test's cleanup. Coarse on such a Clock is Now, exact (as on a
// schedclocktest.Manual counter): a ticker would wake at the same fake
// instant as the test's own sleeps, in an order the bubble does not fix.
//
// The Source counts from the moment Bubble is called; call it inside the
// bubble. Its limits:
//   - outside a bubble it reads the real time (Go's monotonic clock, as
//     Portable does, through time.Now: slower than Portable, and steered
//     by NTP like it), so a Clock on it is an ordinary clock there;
//   - its Rate is declared, never refined (fake time has no rate to
//     measure): do not give its Clock a reference;
//   - a Clock on it has the wall time of the bubble: WallTime(t) is the
//     bubble's time.Now at the moment the clock read t (the bubble's
//     clock starts at 2000-01-01 00:00:00 UTC), exactly and for good, and
//     never the real wall clock (a reading's wall time never changes; after
//     Suspend and Resume, WallTime goes on from the same origin and falls
//     behind the bubble's time.Now by the suspended interval).
func Bubble() Source {
	start := time.Now()
	return Source{
		Name: "bubble (time.Now)",
		Bits: 64,
		Rate: 1_000_000_000,
		Read: func() uint64 {
			v := uint64(time.Since(start))
			orderAfter(v) // the latch's re-check of seq must follow the read
			return v
		},
		bubble: &bubbleOrigin{wall: start.UnixNano()},
	}
}

// bubbleOrigin is the wall time at which a Bubble Source read 0.
type bubbleOrigin struct{ wall int64 }

// adoptWallOriginLocked fixes the wall origin of a clock that now runs on
// src: for a Bubble Source, the wall time of the clock's reading 0, from
// the line just published (a 1 GHz line counts nanoseconds 1:1, so the
// counter's value at the epoch says where the bubble's clock was); none
// for any other Source.
func (c *Clock) adoptWallOriginLocked(src Source) {
	if src.bubble == nil {
		c.st.exact.wallOrigin.Store(nil)
		return
	}
	o := addSat(src.bubble.wall, int64(c.st.cur.epochCyc)-c.st.cur.epochNs)
	c.st.exact.wallOrigin.Store(&o)
}
