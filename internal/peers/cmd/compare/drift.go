package main

import (
	"time"

	"github.com/schedclock/schedclock/internal/measure"
)

// A pairing is a clock reading and the raw clock at the same instant:
// the reading is bracketed by two raw readings and the tightest of many
// brackets is kept, its midpoint taken as the raw time of the reading.
type pairing struct {
	clock, raw int64
	width      int64 // of the bracket: the raw time is known to ±width/2
}

// pair pairs read with rawNow: the tightest of tries (raw, read, raw)
// brackets.
func pair(read func() int64, tries int) pairing {
	b := measure.Tightest(rawNow, read, tries)
	return pairing{clock: b.Inner, raw: b.Mid, width: b.Width}
}

// drift is a clock's rate error against the raw clock over one interval,
// in ppm, and the bound on it that the two brackets' widths give.
type drift struct{ ppm, plusMinus float64 }

func driftBetween(from, to pairing) drift {
	raw := float64(to.raw - from.raw)
	clk := float64(to.clock - from.clock)
	return drift{
		ppm:       (clk - raw) / raw * 1e6,
		plusMinus: float64(from.width+to.width) / 2 / raw * 1e6,
	}
}

// measureDrift pairs every clock with the raw clock once, one after the
// other, then again when each of the intervals has passed since the
// first pairing, and returns [clock][interval] drifts. Nothing else runs
// meanwhile.
func measureDrift(reads []func() int64, intervals []time.Duration) [][]drift {
	const tries = 200
	start := make([]pairing, len(reads))
	for i, read := range reads {
		pair(read, 10) // warm up
		start[i] = pair(read, tries)
	}
	t0 := time.Now()
	out := make([][]drift, len(reads))
	for _, d := range intervals {
		time.Sleep(time.Until(t0.Add(d)))
		for i, read := range reads {
			out[i] = append(out[i], driftBetween(start[i], pair(read, tries)))
		}
	}
	return out
}
