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
var defaultClock = newDefaultClock(probeHardware, kernel.TSCVerdict)

// newDefaultClock builds the default clock at package initialisation:
// a few CPUIDs (or one MRS) and one small file read (the kernel's
// clocksource), and one goroutine, parked until the clock's first use.
// Nothing else runs, and nothing wakes, in a process that never reads it.
// probe finds the hardware counter (probeHardware), tscVerdict reads the
// kernel's word on the TSC (kernel.TSCVerdict); tests give others.
//
// The hardware counter is trusted only on evidence: where the kernel runs
// on it (its clocksource is tsc), the clock starts on it at once; where
// the kernel's verdict is unknown (no sysfs), the clock starts on the
// portable source and adopts the counter only once the cross-CPU check
// has run and found no warp (retried later while it cannot run: one
// allowed CPU, GOMAXPROCS=1, a busy machine). Info shows each piece of
// evidence: Kernel, CrossCPU, Rejected, Pending.
func newDefaultClock(probe func() (Source, RateOrigin, float64, error), tscVerdict func() kernel.Verdict) *Clock {
	hw, origin, errPPM, err := probe()
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
	kernelWord, kernelTrusts := "", true
	switch {
	case err == nil && hw.Name == "tsc":
		v := tscVerdict()
		kernelWord, kernelTrusts = v.String(), v.Known() && v.Current == "tsc"
	case err == nil && hw.Name == "cntvct":
		kernelWord = "not consulted: the arm64 generic timer is one system-wide counter, and the kernel keeps no watchdog on it"
	}
	var c *Clock
	if err == nil && hw.Rate != 0 && kernelTrusts {
		tr := &tracker{ref: rawNow, src: hw, adopted: true, endsOnRegister: true}
		c, err = newClock(hw, rating{hz: float64(hw.Rate), origin: origin, errPPM: errPPM}, tr)
	}
	pending := ""
	if c == nil {
		var tr *tracker
		rejected := ""
		switch {
		case err != nil:
			rejected = err.Error()
		case hw.Rate == 0 || !kernelTrusts:
			tr = &tracker{ref: rawNow, src: hw, endsOnRegister: true}
			if !kernelTrusts {
				rejected = fmt.Sprintf("%s: not trusted yet: %s, and the cross-CPU check has not passed", hw.Name, kernelWord)
				pending = "the cross-CPU check"
			} else {
				// Not rejected: trusted, and adopted as soon as its rate
				// is known. Pending says so.
				pending = measurePending(hw.Name)
			}
		default:
			rejected = fmt.Sprintf("%s: unusable rate %d Hz", hw.Name, hw.Rate)
		}
		var perr error
		c, perr = newClock(Portable(), rating{hz: 1e9, origin: RateDeclared}, tr)
		if perr != nil {
			panic("schedclock: the portable source is invalid: " + perr.Error())
		}
		c.rejected = rejected
	}
	c.isDefault = true
	c.kernel = kernelWord
	c.firstUse = make(chan struct{})
	checks := c.track != nil
	if checks {
		// The hardware counter is in use or about to be: the kernel's
		// verdict is followed for life, and the checks that need time run
		// in the background; until they pass, calibration does not adopt it.
		c.verdict = hardwareVerdict(hw.Name, tscVerdict)
		c.crossCPU = "not run yet: it runs at the clock's first use"
		// With the kernel's word for the TSC the measured rate is adopted
		// at once; without it, only after the cross-CPU check passed.
		c.trustPending = !kernelTrusts || hw.Name == "cntvct"
		c.pending = pending
	} else {
		c.crossCPU = "not run: no hardware counter to check"
	}
	// The first line reads through wake, which starts the background
	// work at the first Now (and is then replaced by the counter's own
	// read function: the read path is as before from then on).
	first := c.cur
	read := first.read
	first.read = func() uint64 {
		c.wakeFirstUse()
		return read()
	}
	c.publishLocked(first)
	c.mu.Lock()
	c.unlock()
	go c.parked(hw, erratum, checks, kernelTrusts && hw.Name == "tsc")
	return c
}

// parked is the default clock's one goroutine: it waits for the first
// use, puts the counter's own read function back in the line, starts the
// checks of the hardware counter and runs the background loop. Being
// started at initialisation, it belongs to no testing/synctest bubble, nor
// does anything it starts.
func (c *Clock) parked(hw Source, erratum errata.Match, checks, vouched bool) {
	select {
	case <-c.firstUse:
	case <-c.stop: // closed unused (the tests' default-like clocks)
		close(c.stopped)
		return
	}
	c.mu.Lock()
	if !c.suspended && funcPtr(c.cur.read) != funcPtr(c.src.Read) && c.cur.read != nil && funcPtr(c.cur.read) != funcPtr(readSuspended) {
		if ln := c.cur; c.cur.conv == c.conv {
			ln.read = c.src.Read
			c.publishLocked(ln)
		}
	}
	c.unlock()
	if checks {
		go c.checkTrust(hw, erratum, vouched)
	}
	c.background()
}

// checkTrust runs the checks a hardware counter must pass before the
// default clock trusts it, in the background: the cross-CPU warp check
// (the kernel's check_tsc_warp), retried after warpRetryAfter, doubling,
// warpRetries times while it cannot run (one CPU allowed, GOMAXPROCS=1, a
// machine too busy), and, for CNTVCT, the read cost against the portable
// source (a counter the kernel traps). A counter that fails leaves the
// default clock on, or sends it back to, the portable source, and Info
// says why; a counter the kernel does not vouch for is adopted only
// after a check that ran and found no warp.
func (c *Clock) checkTrust(hw Source, erratum errata.Match, vouched bool) {
	var counter cntvctTrust
	if hw.Name == "cntvct" {
		counter = decideCNTVCT(erratum, hw.Read, measureReadCost(hw.Read))
	}
	c.mu.Lock()
	if c.closed {
		c.unlock()
		return // closed before its first use ended: nothing to check for
	}
	c.crossCPU = "running"
	c.unlock()
	rep := warp.Check(hw.Read, hw.Rate, warp.DefaultBudget)
	first := warpRetryAfter
	if vouched {
		first = vouchedRetryAfter
	}
	for i, wait := 0, first; rep.Verdict == warp.Unchecked && !rep.Never && i < warpRetries; i, wait = i+1, 2*wait {
		c.mu.Lock()
		c.crossCPU = fmt.Sprintf("%s; again in %v (try %d of %d)", rep, wait, i+2, warpRetries+1)
		if !vouched {
			c.pending = fmt.Sprintf("the cross-CPU check, again in %v (try %d of %d)", wait, i+2, warpRetries+1)
		}
		c.unlock()
		if !c.sleepUnlessClosed(wait) {
			return
		}
		rep = warp.Check(hw.Read, hw.Rate, warp.DefaultBudget)
	}
	c.mu.Lock()
	defer c.unlock()
	c.trustSettledLocked(time.Now())
	c.pending = ""
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
	if err == nil && !vouched && rep.Verdict != warp.None && hw.Name == "tsc" {
		err = fmt.Errorf("%w %q: no evidence: %s, and %s", ErrUntrusted, hw.Name, c.kernel, rep)
	}
	if err != nil {
		c.fallBackLocked(err.Error())
	}
	c.kick()
}

// measurePending is what Info.Pending says while the default clock
// measures the rate of the trusted counter name before adopting it.
func measurePending(name string) string {
	return fmt.Sprintf("%s: adopted once its rate is measured against %s (%v)", name, rawClockName, firstMeasurement)
}

// warpRetryAfter is how long the default clock waits before it runs the
// cross-CPU check again when it could not run, on a counter whose
// adoption waits for it; the wait doubles at each of warpRetries tries
// (3, 6, 12, 24, 48 s). Where the kernel vouches for the counter (its
// clocksource is the TSC: it checked the CPUs' TSCs against each other
// as each came up, and its watchdog watches it), the clock runs on it
// already and the check is a second opinion: it is retried after
// vouchedRetryAfter instead (1, 2, 4, 8, 16 min), since each try keeps
// two threads spinning on every pair of CPUs for its budget (20 ms of
// CPU on two CPUs), which an idle process should not pay every few
// seconds.
const (
	warpRetryAfter    = 3 * time.Second
	vouchedRetryAfter = time.Minute
	warpRetries       = 5
)

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

// Default returns the package's default clock, the one Now, Since,
// Coarse and WallNow read. It is shared by every package of the process:
// its Close is refused (ErrDefaultClock); Register, Suspend and Resume
// are for the program's main package alone (see Suspend).
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
func hardwareVerdict(name string, tscVerdict func() kernel.Verdict) func() string {
	if name != "tsc" {
		return nil
	}
	return func() string {
		if v := tscVerdict(); !v.Keep() {
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
