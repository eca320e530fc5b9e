// Package measure holds what the programs beside the library measure
// clocks with (examples/clockinfo, examples/latency and the peers'
// comparison in internal/peers): the raw clock they compare against,
// the tightest bracket of one clock's reading between two of another's,
// and the length of a timing loop. One copy, so that their figures are
// taken the same way.
package measure

import (
	"fmt"
	"math"
	"time"
)

// Bracket is one clock's reading taken between two readings of another,
// the outer clock: on the outer clock's timeline the reading happened at
// Mid, to within ±Width/2.
type Bracket struct {
	Mid   int64 // midpoint of the two outer readings
	Inner int64 // the bracketed reading
	Width int64 // time between the two outer readings
}

// Tightest reads outer, inner, outer, tries times, and keeps the
// narrowest bracket: the one least disturbed by an interrupt, a
// preemption or a slow read.
func Tightest(outer, inner func() int64, tries int) Bracket {
	best := Bracket{Width: math.MaxInt64}
	for range tries {
		before := outer()
		reading := inner()
		after := outer()
		if after-before < best.Width {
			best = Bracket{Mid: before + (after-before)/2, Inner: reading, Width: after - before}
		}
	}
	return best
}

// LoopLength returns how many iterations of a loop take about d, and at
// least floor. timeLoop(n) runs the loop n times and says how long that
// took. It times 1000 iterations, then growth times more each round,
// until a round takes d/growth or more (long enough that the clock's
// resolution and one interruption do not matter), and scales that
// round's count to d.
func LoopLength(timeLoop func(n int) time.Duration, d time.Duration, growth, floor int) int {
	n := 1000
	for {
		elapsed := timeLoop(n)
		if elapsed >= d/time.Duration(growth) || n >= 1<<30 {
			return max(floor, int(float64(n)*float64(d)/float64(max(elapsed, 1))))
		}
		n *= growth
	}
}

// Ns writes a duration given in (fractional) nanoseconds with a unit
// that keeps three significant digits: "12 ns", "1.5 µs", "2.5 ms",
// "1.6 s", so that the programs print their figures alike.
func Ns(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.3g s", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.3g ms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.3g µs", ns/1e3)
	}
	return fmt.Sprintf("%.3g ns", ns)
}
