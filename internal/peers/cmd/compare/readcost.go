package main

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/schedclock/schedclock/internal/measure"
)

// readSink keeps the compiler from dropping the timed reads.
var readSink atomic.Int64

// readLoop calls read n times. Every clock is called through a func
// value, so each pays the same indirect call (the floor row measures it).
func readLoop(read func() int64, n int) time.Duration {
	var sum int64
	start := time.Now()
	for range n {
		sum += read()
	}
	elapsed := time.Since(start)
	readSink.Add(sum)
	return elapsed
}

// loopLength returns how many reads take about d.
func loopLength(read func() int64, d time.Duration) int {
	return measure.LoopLength(func(n int) time.Duration { return readLoop(read, n) }, d, 4, 1)
}

// readCost is a clock's ns per read: the median of rounds, and the
// fastest and slowest round.
type readCost struct{ median, min, max float64 }

// measureReadCost times every clock for about per in each of rounds
// rounds, interleaved: each round visits all clocks, starting one further
// along each time, so that a slow moment of a shared machine spreads over
// all clocks instead of landing on one.
func measureReadCost(reads []func() int64, rounds int, per time.Duration) []readCost {
	lengths := make([]int, len(reads))
	for i, read := range reads {
		readLoop(read, 1000) // warm up: first calls, caches, lazy calibration
		lengths[i] = loopLength(read, per)
	}
	samples := make([][]float64, len(reads))
	for round := range rounds {
		for k := range reads {
			i := (round + k) % len(reads)
			elapsed := readLoop(reads[i], lengths[i])
			samples[i] = append(samples[i], float64(elapsed.Nanoseconds())/float64(lengths[i]))
		}
	}
	costs := make([]readCost, len(reads))
	for i, s := range samples {
		costs[i] = readCost{median: median(s), min: slices.Min(s), max: slices.Max(s)}
	}
	return costs
}

func median(s []float64) float64 {
	s = slices.Clone(s)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
