package schedclock

import (
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/schedclock/schedclock/internal/errata"
	"github.com/schedclock/schedclock/internal/kernel"
	"github.com/schedclock/schedclock/internal/warp"
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
	var erratum errata.Match
	if err == nil && hw.Name == "cntvct" {
		// The kernel's erratum workarounds trap the counter; reading it
		// needs the same workaround from user space. A few small file
		// reads: cheap enough for initialisation.
		erratum = errata.Detect(os.DirFS("/"))
		if read := cntvctErratumReader(erratum.Erratum); read != nil {
			hw.Read = read
		}
	}
	var c *Clock
	if err == nil && hw.Rate != 0 {
		tr := &tracker{ref: rawNow, src: hw, adopted: true, endsOnRegister: true}
		c, err = newClock(hw, rating{hz: float64(hw.Rate), origin: origin, errPPM: errPPM}, tr)
	}
	if c == nil {
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
		var perr error
		c, perr = newClock(Portable(), rating{hz: 1e9, origin: RateDeclared}, tr)
		if perr != nil {
			panic("schedclock: the portable source is invalid: " + perr.Error())
		}
		c.rejected = rejected
		if tr == nil {
			c.crossCPU = "not run: no hardware counter to check"
			c.start()
			return c
		}
	}
	// The hardware counter is in use or about to be: the kernel's verdict
	// is followed for life, and the checks that need time run in the
	// background; until they pass, calibration does not adopt it.
	c.verdict = hardwareVerdict(hw.Name)
	c.crossCPU = "running"
	c.trustPending = true
	c.start()
	go c.checkTrust(hw, erratum)
	return c
}

// checkTrust runs the checks a hardware counter must pass before the
// default clock trusts it, in the background: the cross-CPU warp check
// (the kernel's check_tsc_warp; retried once a few seconds later when
// the machine was too busy for it to run) and, for CNTVCT, the read cost
// against the portable source (a counter the kernel traps). A counter
// that fails leaves the default clock on, or sends it back to, the
// portable source, and Info says why.
func (c *Clock) checkTrust(hw Source, erratum errata.Match) {
	var counter cntvctTrust
	if hw.Name == "cntvct" {
		counter = decideCNTVCT(erratum, hw.Read, measureReadCost(hw.Read))
	}
	rep := warp.Check(hw.Read, hw.Rate, warp.DefaultBudget)
	if rep.Busy && c.sleepUnlessClosed(warpRetryAfter) {
		rep = warp.Check(hw.Read, hw.Rate, warp.DefaultBudget)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trustPending = false
	c.crossCPU = rep.String()
	if hw.Name == "cntvct" {
		c.counterCheck = counter.String()
	}
	if c.closed || c.track == nil || c.track.src.Name != hw.Name {
		return // closed, or a caller took the clock over
	}
	err := warpUntrusted(rep, hw.Name)
	if err == nil {
		err = counter.untrusted()
	}
	if err != nil {
		c.fallBackLocked(err.Error())
	}
	c.kick()
}

// warpRetryAfter is how long the default clock waits before it runs the
// cross-CPU check again when the machine was too busy for it.
const warpRetryAfter = 3 * time.Second

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

// probeHardware returns this machine's hardware counter without blocking:
// the TSC on amd64, CNTVCT_EL0 on arm64. When the rate must be measured,
// src.Rate is 0 and origin is RateMeasured. err wraps ErrUnsupported or
// ErrUntrusted and says why when there is no counter to use.
func probeHardware() (src Source, origin RateOrigin, errPPM float64, err error) {
	switch runtime.GOARCH {
	case "amd64":
		return probeTSC()
	case "arm64":
		return probeCNTVCT()
	}
	return Source{}, 0, 0, fmt.Errorf("%w: no hardware counter for GOARCH=%s", ErrUnsupported, runtime.GOARCH)
}

// hardwareVerdict returns the default clock's check that the kernel still
// trusts the hardware counter name: "" while it does, else why not (see
// kernel.Verdict). The kernel's clocksource watchdog can demote the TSC
// hours after boot. The arm64 generic timer has no such watchdog (and
// under qemu-user sysfs is the host's), so only the TSC is followed.
// Where there is no sysfs file to read (not Linux), the kernel has
// nothing to say.
func hardwareVerdict(name string) func() string {
	if name != "tsc" {
		return nil
	}
	return func() string {
		if v := kernel.TSCVerdict(); !v.Keep() {
			return fmt.Sprintf("%s: %s", name, v)
		}
		return ""
	}
}

// warpUntrusted returns nil unless the cross-CPU check found a warp, and
// then an error wrapping ErrUntrusted that names the counter, the CPUs
// and the warp.
func warpUntrusted(r warp.Report, name string) error {
	if r.Verdict != warp.Found {
		return nil
	}
	return fmt.Errorf("%w %q: %s", ErrUntrusted, name, r)
}
