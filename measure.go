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
// counter) reads.
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
	return best
}

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
