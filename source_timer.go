package schedclock

import (
	"fmt"
	"math"
	"time"

	"github.com/schedclock/schedclock/internal/format"
	"github.com/schedclock/schedclock/internal/kernel"
)

// What the riscv64, ppc64le, s390x and loong64 counters share: each is a
// 64-bit counter that every CPU of the machine reads at the same rate
// from one time base, which the kernel uses as its clocksource (and
// sched_clock) under a name of its own; only its instruction, its
// ordering and the origin of its rate differ (source_rdtime.go,
// source_timebase.go, source_tod.go, source_stablecounter.go).

// timerBits is the width of each of these counters: the kernel registers
// every one with CLOCKSOURCE_MASK(64).
const timerBits = 64

// nominalRateErrPPM is the error reported for a rate that firmware
// states (device tree, cpuinfo, CPUCFG): it is the oscillator's nominal
// frequency, and an oscillator sits some tens of ppm from it. The rate
// is refined in the background anyway.
const nominalRateErrPPM = 50

// timerMeasureTime is how long a constructor measures a counter's rate
// against CLOCK_MONOTONIC_RAW where no firmware figure gives it (qemu-user
// has no device tree and passes the host's /proc/cpuinfo through): 200 ms
// keeps the measurement's error within some 10 ppm under emulation, where
// each bracketing read of the reference costs a microsecond or two.
const timerMeasureTime = 200 * time.Millisecond

// A firmware figure is checked before a constructor hands it out: a
// measurement of rateCheckTime must agree with it to within
// rateCheckPPM, far more than an oscillator's error and the
// measurement's together, so only a counter that does not run at the
// stated rate at all fails it. qemu-loongarch64 7.2 is one: its CPUCFG
// says 100 MHz, its RDTIME.D reads the host's TSC (2.69 GHz here).
const (
	rateCheckTime = 20 * time.Millisecond
	rateCheckPPM  = 1000
)

// withMeasuredRate completes what a probe returned: where the probe found
// no rate (origin rateMeasured, Rate 0), or where the counter does not
// run at the rate firmware stated, it measures the rate, which blocks
// for timerMeasureTime, and rounds it to the nearest Hz. Checking a
// stated rate costs rateCheckTime.
func withMeasuredRate(src Source, origin rateOrigin, err error) (Source, error) {
	if err != nil {
		return Source{}, err
	}
	if origin != rateMeasured && statedRateHolds(src) {
		return src, nil
	}
	hz, _, err := measureRate(src.Read, timerMeasureTime)
	if err != nil {
		return Source{}, fmt.Errorf("%w %q: measuring its rate against %s: %v", errUntrusted, src.Name, rawClockName, err)
	}
	src.Rate = uint64(math.Round(hz))
	return src, nil
}

// statedRateHolds reports whether src counts at its Rate, to within
// rateCheckPPM over rateCheckTime. A measurement that fails says nothing
// either way, and leaves the stated rate.
func statedRateHolds(src Source) bool {
	hz, errPPM, err := measureRate(src.Read, rateCheckTime)
	if err != nil {
		return true
	}
	offPPM := math.Abs(hz-float64(src.Rate)) / float64(src.Rate) * 1e6
	return offPPM <= rateCheckPPM+errPPM
}

// clocksourceVerdict returns a counter's verdict for the default clock's
// table: the kernel's current clocksource must be want, the name under
// which the kernel registers that counter, as the TSC's must be tsc. The
// kernel has checked what user space cannot (a counter that stops in
// idle, one a hypervisor traps) and keeps checking it; a counter it does
// not run on is not ours to trust. Under qemu-user sysfs is the host's
// (kvm-clock here), so the default clock stays on the portable source
// there.
// Each counter's entry names a function of its own that calls it, so
// that the table is static data (no closure to allocate at package
// initialisation).
func clocksourceVerdict(want string) kernel.Verdict {
	return kernel.ReadVerdict(kernel.ClocksourcePath, want)
}

// prepareReadCost is the check these counters' entries run before the
// default clock adopts them, as CNTVCT's does: a read that costs more
// than the portable source's (an instruction a hypervisor or the kernel
// traps and emulates) is refused, and the default clock falls back. So
// is a counter that does not run at the rate its firmware states
// (statedRateHolds; qemu-loongarch64's), which the default clock would
// otherwise adopt at that rate.
func prepareReadCost(src Source) (Source, func() (string, error)) {
	return src, func() (string, error) {
		if src.Rate != 0 && !statedRateHolds(src) {
			return src.Name + ": does not run at its stated rate", fmt.Errorf("%w %q: does not run at the stated %d Hz", errUntrusted, src.Name, src.Rate)
		}
		cost := measureReadCost(src.Read)
		found := fmt.Sprintf("%s: read %s, portable %s", src.Name, format.Ns(cost.CounterNs), format.Ns(cost.PortableNs))
		if cost.counterSlower() {
			return found + ": slower than the portable source", fmt.Errorf("%w %q: read %s, slower than the portable source's %s (the counter is trapped?)",
				errUntrusted, src.Name, format.Ns(cost.CounterNs), format.Ns(cost.PortableNs))
		}
		return found, nil
	}
}
