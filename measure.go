package schedclock

import (
	"errors"
	"time"
)

// ratePoint pairs a counter value with a reference clock: the counter
// value is the midpoint of two counter reads that bracket one reference
// read, and halfWidth is half their distance, the uncertainty of the
// pairing in counter cycles (all ones: no pairing was found).
type ratePoint struct {
	cyc       uint64
	ns        int64
	halfWidth uint64
}

// bracketSamples is how many bracketed reads samplePoint takes; the
// narrowest bracket wins, which filters out preemptions and slow syscalls.
const bracketSamples = 32

// samplePoint takes the fastest of bracketSamples (counter, reference,
// counter) reads. A bracket cannot be trusted below the counter's own
// step: a counter that moves in coarse steps (jiffies, an emulated
// counter) reads the same value on both sides of most brackets, though
// its true value lies anywhere within the step. So the half-width is at
// least one count, and at least the step the counter takes when read
// until it moves.
func samplePoint(read func() uint64, ref func() int64) ratePoint {
	best := ratePoint{halfWidth: ^uint64(0)}
	for i := 0; i < bracketSamples; i++ {
		before := read()
		ns := ref()
		after := read()
		if after < before {
			continue
		}
		width := after - before
		if width/2 < best.halfWidth {
			best = ratePoint{cyc: before + width/2, ns: ns, halfWidth: width / 2}
		}
	}
	if best.halfWidth != ^uint64(0) {
		best.halfWidth = max(best.halfWidth, 1, counterStep(read))
	}
	return best
}

// counterStep reads the counter until it moves (at most stepReads
// times) and returns by how much: its resolution, as far as a reader can
// see it (0 if it never moved). The smallest of three tries, so that a
// reader preempted while it waits does not count the preemption.
func counterStep(read func() uint64) uint64 {
	step := ^uint64(0)
	for try := 0; try < 3; try++ {
		first := read()
		for i := 0; i < stepReads; i++ {
			if v := read(); v != first {
				step = min(step, v-first)
				break
			}
		}
	}
	if step == ^uint64(0) {
		return 0
	}
	return step
}

// stepReads bounds counterStep: about 100 µs of reads of a fast counter.
const stepReads = 4096

// rateBetween returns the counter rate in Hz between two points and its
// worst-case error in ppm: both brackets' half-widths plus one nanosecond
// of reference resolution at each end.
func rateBetween(a, b ratePoint) (hz float64, errPPM float64, err error) {
	if a.halfWidth == ^uint64(0) || b.halfWidth == ^uint64(0) {
		return 0, 0, errors.New("counter never read forwards")
	}
	if b.cyc <= a.cyc || b.ns <= a.ns {
		return 0, 0, errors.New("counter or reference did not advance")
	}
	cycles := float64(b.cyc - a.cyc)
	nanos := float64(b.ns - a.ns)
	hz = cycles / nanos * 1e9
	errPPM = (float64(a.halfWidth+b.halfWidth)/cycles + 2/nanos) * 1e6
	return hz, errPPM, nil
}

// measureRate measures read's rate against the raw clock over about d (it
// sleeps for d) and returns it with its worst-case error in ppm.
func measureRate(read func() uint64, d time.Duration) (hz float64, errPPM float64, err error) {
	start := samplePoint(read, rawNow)
	time.Sleep(d)
	return rateBetween(start, samplePoint(read, rawNow))
}
