package measure

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTightestKeepsTheNarrowestBracket feeds scripted clocks: the outer
// one's brackets are 10, 4, 7 and 4 wide, and the first bracket of width 4
// must be the one kept, its midpoint and its own inner reading.
func TestTightestKeepsTheNarrowestBracket(t *testing.T) {
	outerReads := []int64{100, 110, 200, 204, 300, 307, 400, 404}
	innerReads := []int64{1, 2, 3, 4}
	var o, i int
	outer := func() int64 { o++; return outerReads[o-1] }
	inner := func() int64 { i++; return innerReads[i-1] }
	b := Tightest(outer, inner, 4)
	assert.Equal(t, Bracket{Mid: 202, Inner: 2, Width: 4}, b)
	assert.Equal(t, 8, o, "two outer reads a try")
	assert.Equal(t, 4, i, "one inner read a try")
}

// TestLoopLength scripts a loop that takes 3 ns an iteration: the rounds
// grow by growth until one takes d/growth, and that round's count is
// scaled to d; floor bounds the answer from below.
func TestLoopLength(t *testing.T) {
	var rounds []int
	loop := func(n int) time.Duration { rounds = append(rounds, n); return time.Duration(3 * n) }
	assert.Equal(t, 1_000_000, LoopLength(loop, 3*time.Millisecond, 4, 1))
	// 1000 iterations take 3 µs < 750 µs, ... 256000 take 768 µs >= 750 µs.
	assert.Equal(t, []int{1000, 4000, 16000, 64000, 256000}, rounds)

	rounds = nil
	assert.Equal(t, 700, LoopLength(loop, 1500*time.Nanosecond, 8, 700), "the floor, above the 500 the round scales to")
	assert.Equal(t, []int{1000}, rounds)
}

// TestRawAdvances checks that Raw is a clock: it never goes back, and it
// moves by at least what Go's monotonic clock saw between the two reads
// (NTP slews that one by at most 500 ppm), however loaded the machine.
func TestRawAdvances(t *testing.T) {
	a := Raw()
	inner := time.Now()
	innerEnd := time.Now()
	for innerEnd.Sub(inner) < 100*time.Microsecond {
		innerEnd = time.Now()
	}
	b := Raw()
	require.GreaterOrEqual(t, b, a)
	assert.GreaterOrEqual(t, time.Duration(b-a), innerEnd.Sub(inner)*999/1000, "less than Go's monotonic clock between the reads")
}

// TestNs checks each unit, its boundaries and the three significant
// digits against values written out by hand.
func TestNs(t *testing.T) {
	for ns, want := range map[float64]string{
		0:        "0 ns",
		12:       "12 ns",
		999:      "999 ns",
		999.94:   "1e+03 ns", // three digits round up, the unit does not
		1000:     "1 µs",
		1500:     "1.5 µs",
		123456:   "123 µs",
		1e6:      "1 ms",
		2.5e6:    "2.5 ms",
		1e9:      "1 s",
		1.6e9:    "1.6 s",
		3.1416e9: "3.14 s",
		7200e9:   "7.2e+03 s",
	} {
		assert.Equal(t, want, Ns(ns), "Ns(%v)", ns)
	}
}
