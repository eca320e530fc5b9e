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
// counter is watched against it. On Linux the kernel's verdict on the
// counter (and the counter's own evidence, where its descriptor has some)
// is read again every verdictPeriod: when the kernel stops using the
// counter as its clocksource (its watchdog demoted it), so does the
// default clock (trust.go).
// A caller's Register ends all of this: the caller has taken the clock
// over.
var defaultClock = newDefaultClock(counters)

func init() { warmFirstCalls() }

// newDefaultClock builds the default clock at package initialisation:
// a few CPUIDs (or one MRS) and a few small file reads (the kernel's
// clocksource), and one goroutine, parked until the clock's first use.
// Nothing else runs, and nothing wakes, in a process that never reads it.
// table lists the hardware counters in order of preference (counters;
// tests give others).
//
// The hardware counter is trusted only on evidence: where the kernel runs
// on it (its clocksource is that counter), the clock starts on it at
// once; where the kernel's verdict is unknown (no sysfs), the clock
// starts on the portable source and adopts the counter only once the
// cross-CPU check has run and found no warp (retried later while it
// cannot run: one allowed CPU, GOMAXPROCS=1, a busy machine); where the
// kernel keeps no verdict on it (the arm64 generic timer), the counter's
// own check decides. Info shows each piece of evidence: Kernel, CrossCPU,
// CounterCheck, Rejected, Pending.
func newDefaultClock(table []*counter) *Clock {
	ch := chooseCounter(table)
	hw, err := ch.src, ch.err
	p := &trustPolicy{firstUse: make(chan struct{})}
	kernelTrusts := true
	if d := ch.desc; d != nil {
		if d.prepare != nil {
			hw, p.ownCheck = d.prepare(hw)
		}
		p.kernel = d.noVerdict
		p.status = d.status
		if d.describe != nil {
			p.describe = d.describe
			p.counterCheck = d.describe()
		}
		if d.verdict != nil {
			v := d.verdict()
			p.kernel = v.String()
			p.vouched = v.Known() && v.Current == v.Want
			p.needsEvidence = !p.vouched
			kernelTrusts = p.vouched
		}
		p.hw = hw
	}
	var c *Clock
	if err == nil && hw.Rate != 0 && kernelTrusts {
		tr := &tracker{ref: rawNow, src: hw, adopted: true, endsOnRegister: true}
		c, err = newClock(hw, rating{hz: float64(hw.Rate), origin: ch.origin, errPPM: ch.errPPM}, tr)
	}
	if c == nil {
		var tr *tracker
		switch {
		case err != nil:
			p.rejected = err.Error()
		case hw.Rate == 0 || !kernelTrusts:
			tr = &tracker{ref: rawNow, src: hw, endsOnRegister: true}
			if !kernelTrusts {
				p.rejected = fmt.Sprintf("%s: not trusted yet: %s, and the cross-CPU check has not passed", hw.Name, p.kernel)
				p.pending = "the cross-CPU check"
			} else {
				// Not rejected: trusted, and adopted as soon as its rate
				// is known. Pending says so.
				p.pending = measurePending(hw.Name)
			}
		default:
			p.rejected = fmt.Sprintf("%s: unusable rate %d Hz", hw.Name, hw.Rate)
		}
		var perr error
		c, perr = newClock(Portable(), rating{hz: 1e9, origin: RateDeclared}, tr)
		if perr != nil {
			panic("schedclock: the portable source is invalid: " + perr.Error())
		}
	}
	c.policy = p
	checks := c.track != nil
	if checks {
		// The hardware counter is in use or about to be: the kernel's
		// verdict is followed for life, and the checks that need time run
		// in the background; until they pass, calibration does not adopt
		// it (but where the kernel vouches for it, a measured rate is
		// adopted at once).
		p.verdict = lostTrust(ch.desc, hw.Name)
		p.crossCPU = "not run yet: it runs at the clock's first use"
		p.trustPending = !p.vouched
	} else {
		p.crossCPU = "not run: no hardware counter to check"
	}
	// The first line reads through wake, which starts the background
	// work at the first Now (and is then replaced by the counter's own
	// read function: the read path is as before from then on).
	first := c.cur
	read := first.read
	first.read = func() uint64 {
		p.wakeFirstUse()
		return read()
	}
	c.publishLocked(first)
	c.mu.Lock()
	c.unlock()
	go c.parked(checks)
	return c
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
