package schedclock

import (
	"fmt"
	"math"
	"time"
)

// The default clock follows the kernel's boot sequence: it starts on a
// source that is ready at once, the hardware counter wins as soon as its
// rate is known, and the rate is then refined in the background. Package
// initialisation never blocks: it costs a few CPUIDs (or one MRS) and one
// small file read. Every switch and refinement goes through switchLine,
// so Now never goes backwards across them, wherever the writer stops.
//
//   - Where CPUID, the hypervisor leaf or CNTFRQ_EL0 gives the rate, the
//     clock starts on the hardware counter directly.
//   - Where the hardware counter is trusted but its rate must be measured,
//     the clock starts on the portable source and switches to the counter
//     after a 20 ms measurement against CLOCK_MONOTONIC_RAW, in the
//     background.
//   - Where no hardware counter can be used, the clock stays on the
//     portable source and Info().Rejected says why.
//
// Refinement then measures the counter against CLOCK_MONOTONIC_RAW over
// a growing baseline (see calibrationSchedule) and adopts each better
// estimate, until the estimated error is below refineTargetPPM.
var defaultClock = newDefaultClock()

// processStart is the raw clock when the package was initialised.
var processStart = rawNow()

// firstMeasurement is how long the background goroutine measures a rate
// that no CPU register gives before the hardware counter is adopted.
const firstMeasurement = 20 * time.Millisecond

// refineTargetPPM: the refinement stops once the estimated error of the
// rate is below it.
const refineTargetPPM = 0.05

// calibrationSchedule lists when, counted from the first sample, the
// refinement measures the rate again. The error of a measurement is the
// width of its two brackets over the baseline, so it shrinks as 1/t.
var calibrationSchedule = []time.Duration{
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	1 * time.Second, 1500 * time.Millisecond, 2 * time.Second, 4 * time.Second,
	8 * time.Second, 16 * time.Second, 32 * time.Second, 64 * time.Second,
}

func newDefaultClock() *Clock {
	hw, origin, errPPM, err := probeHardware()
	if err == nil && hw.Rate != 0 {
		if c, err := newClock(hw, origin, errPPM); err == nil {
			go c.calibrate(hw, samplePoint(hw.Read))
			return c
		}
	}
	c, perr := newClock(Portable(), RateDeclared, 0)
	if perr != nil {
		panic("schedclock: the portable source is invalid: " + perr.Error())
	}
	switch {
	case err != nil:
		c.rejected = err.Error()
	case hw.Rate != 0:
		c.rejected = fmt.Sprintf("%s: unusable rate %d Hz", hw.Name, hw.Rate)
	default:
		c.rejected = fmt.Sprintf("%s: rate being measured against %s", hw.Name, rawClockName)
		go c.calibrate(hw, samplePoint(hw.Read))
	}
	return c
}

// calibrate measures hw's rate against the raw clock from the point
// start, adopts the counter once its rate is known (if the clock is not
// on it yet), and refines the rate while the measurement improves on it.
func (c *Clock) calibrate(hw Source, start ratePoint) {
	if hw.Rate == 0 {
		if !c.sleepUnlessClosed(firstMeasurement) || !c.adoptRate(hw, start, RateMeasured) {
			return
		}
	}
	for _, at := range calibrationSchedule {
		if !c.sleepUnlessClosed(time.Duration(start.ns+int64(at)-rawNow())) || !c.adoptRate(hw, start, RateRefined) {
			return
		}
		c.mu.Lock()
		done := c.errPPM <= refineTargetPPM
		c.mu.Unlock()
		if done {
			return
		}
	}
}

// sleepUnlessClosed sleeps for d or until the clock is closed, and
// reports whether it is still open.
func (c *Clock) sleepUnlessClosed(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-c.stop:
		return false
	}
}

// adoptRate measures hw from start to now and, if the estimate is better
// than the clock's, switches the clock to hw at that rate. It reports
// whether calibration should go on.
func (c *Clock) adoptRate(hw Source, start ratePoint, origin RateOrigin) bool {
	hz, errPPM, err := rateBetween(start, samplePoint(hw.Read))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	if err != nil || hz < 1 || hz > math.MaxUint64/2 {
		if origin == RateMeasured {
			c.rejected = fmt.Sprintf("%s: measuring its rate against %s failed: %v", hw.Name, rawClockName, err)
			return false
		}
		return true
	}
	if c.calibrationOver {
		// A caller registered a source of their own: it wins, and the
		// calibration of ours ends.
		return false
	}
	onHardware := funcPtr(c.src.Read) == funcPtr(hw.Read)
	if onHardware && errPPM >= c.errPPM {
		return true
	}
	src := hw
	src.Rate = uint64(math.Round(hz))
	conv, err := newConversion(src)
	if err != nil {
		c.rejected = err.Error()
		return false
	}
	// The conversion's own rounding is part of the error: mult is an
	// integer, so ns per cycle is off by up to half a unit of it.
	errPPM += math.Abs(float64(conv.mult)/(float64(uint64(1)<<conv.shift)*1e9/hz)-1) * 1e6
	if onHardware && conv == c.conv {
		c.src.Rate, c.origin, c.errPPM = src.Rate, origin, errPPM
		return true
	}
	if err := c.switchLocked(src, conv, origin, errPPM); err != nil {
		c.rejected = err.Error()
		return false
	}
	c.rejected = ""
	return true
}

// Now returns the default clock's time in nanoseconds: Default().Now().
func Now() int64 { return defaultClock.Now() }

// Default returns the package's default clock. Closing it stops its
// refresh and calibration; it keeps answering Now.
func Default() *Clock { return defaultClock }
