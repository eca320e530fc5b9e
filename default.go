package schedclock

import (
	"fmt"
	"time"
)

// The default clock follows the kernel's boot sequence: it starts on a
// source that is ready at once, the hardware counter wins as soon as its
// rate is known, and the rate is then refined in the background. Package
// initialisation never blocks: it costs a few CPUIDs (or one MRS) and one
// small file read. Every switch and refinement goes through the switch
// protocol (switch.go), so Now never goes backwards across them, wherever
// the writer stops.
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
// CLOCK_MONOTONIC_RAW is the default clock's reference (see calibrate.go):
// the hardware counter's rate is refined against it for life, and the
// counter is watched against it. On Linux the kernel's verdict on the TSC
// is read again every verdictPeriod: when the kernel stops using the TSC
// as its clocksource (its watchdog demoted it), so does the default clock.
// A caller's Register ends all of this: the caller has taken the clock
// over.
var defaultClock = newDefaultClock()

// processStart is the raw clock when the package was initialised.
var processStart = rawNow()

func newDefaultClock() *Clock {
	hw, origin, errPPM, err := probeHardware()
	if err == nil && hw.Rate != 0 {
		tr := &tracker{ref: rawNow, src: hw, adopted: true, endsOnRegister: true}
		if c, err := newClock(hw, rating{hz: float64(hw.Rate), origin: origin, errPPM: errPPM}, tr); err == nil {
			c.verdict = hardwareVerdict(hw.Name)
			c.start()
			return c
		}
	}
	var tr *tracker
	rejected := ""
	switch {
	case err != nil:
		rejected = err.Error()
	case hw.Rate != 0:
		rejected = fmt.Sprintf("%s: unusable rate %d Hz", hw.Name, hw.Rate)
	default:
		rejected = fmt.Sprintf("%s: rate being measured against %s", hw.Name, rawClockName)
		tr = &tracker{ref: rawNow, src: hw, endsOnRegister: true}
	}
	c, perr := newClock(Portable(), rating{hz: 1e9, origin: RateDeclared}, tr)
	if perr != nil {
		panic("schedclock: the portable source is invalid: " + perr.Error())
	}
	c.rejected = rejected
	if tr != nil {
		c.verdict = hardwareVerdict(hw.Name)
	}
	c.start()
	return c
}

// fallBackLocked leaves the hardware counter for the portable source, for
// the reason why, and stops calibrating and watching it.
func (c *Clock) fallBackLocked(why string) {
	c.track, c.verdict = nil, nil
	c.rejected = why
	if c.src.Name == "portable" {
		return
	}
	src := Portable()
	conv, err := newConversion(src)
	if err == nil {
		err = c.switchLocked(src, conv, rating{hz: 1e9, origin: RateDeclared})
	}
	if err != nil {
		c.rejected = fmt.Sprintf("%s; switching to the portable source failed: %v", why, err)
	}
}

// Now returns the default clock's time in nanoseconds: Default().Now().
func Now() int64 { return defaultClock.Now() }

// Since returns the time elapsed on the default clock since start, a value
// Now returned: Default().Since(start), never negative.
func Since(start int64) time.Duration { return defaultClock.Since(start) }

// Default returns the package's default clock. Closing it stops its
// refresh and calibration; it keeps answering Now.
func Default() *Clock { return defaultClock }
