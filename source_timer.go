package schedclock

import (
	"errors"
	"io/fs"
	"math"
	"time"

	"github.com/schedclock/schedclock/internal/format"
	"github.com/schedclock/schedclock/internal/hwcounter"
	"github.com/schedclock/schedclock/internal/kernel"
	"github.com/schedclock/schedclock/internal/sysfile"
	"github.com/schedclock/schedclock/internal/timebase"
)

// The riscv64, ppc64le, s390x and loong64 counters: each is a 64-bit
// counter that every CPU of the machine reads at the same rate from one
// time base, which the kernel uses as its clocksource (and sched_clock)
// under a name of its own; only its instruction and ordering (its
// source_NAME_GOARCH.s says why each), its clocksource's name and the
// origin of its rate differ, which a timer holds as data. Hardware
// returns GOARCH's (timer.source); the default clock's table has it,
// trusted on the kernel's word (its clocksource is that counter), which
// it follows for life, and only where a read costs no more than the
// portable source's (prepareReadCost: some SBI implementations trap
// RDTIME; qemu-loongarch64's counter does not run at the CPUCFG rate).

// timer is one of these counters.
type timer struct {
	name, arch  string
	clocksource string // the name the kernel registers it under
	supported   bool
	read        func() func() uint64 // its reader (internal/hwcounter)
	// rate is the counter's rate as firmware or the architecture states
	// it, with the origin and error of that figure: 0 and rateMeasured
	// where none does, or an error wrapping errUntrusted that says why a
	// stated figure is unusable.
	rate func() (hz uint64, origin rateOrigin, errPPM float64, err error)
}

var (
	// The time CSR (drivers/clocksource/timer-riscv.c), at the device
	// tree's /cpus/timebase-frequency, the figure the kernel's timer
	// driver runs on; ACPI systems and qemu-user expose none.
	rdtimeTimer = timer{name: "rdtime", arch: "riscv64", clocksource: "riscv_clocksource",
		supported: hwcounter.RDTIMESupported, read: hwcounter.RDTIME, rate: rdtimeRateHere}
	// The time base (clocksource_timebase, arch/powerpc/kernel/time.c),
	// at /proc/cpuinfo's timebase line, the kernel's ppc_tb_freq
	// (qemu-user passes the host's file through: none there).
	timebaseTimer = timer{name: "timebase", arch: "ppc64le", clocksource: "timebase",
		supported: hwcounter.TimeBaseSupported, read: hwcounter.TimeBase, rate: timebaseRateHere}
	// The TOD clock (clocksource_tod, arch/s390/kernel/time.c), at its
	// architected rate. The architecture keeps the TOD clocks of all
	// CPUs synchronised (the TOD-clock-sync control, and STP across
	// machines), so that a value stored on one CPU is never behind one
	// stored earlier on another: what lets the kernel use it for
	// sched_clock on every CPU without the TSC's cross-CPU checks.
	todTimer = timer{name: "tod", arch: "s390x", clocksource: "tod",
		supported: hwcounter.TODSupported, read: hwcounter.TOD, rate: todRateHere}
	// The stable counter (clocksource_const,
	// arch/loongarch/kernel/time.c), at the rate CPUCFG leaves 4 and 5
	// give, as the kernel's calc_const_freq computes it.
	stableCounterTimer = timer{name: "stablecounter", arch: "loong64", clocksource: "Constant",
		supported: hwcounter.StableCounterSupported, read: hwcounter.StableCounter, rate: stableCounterRateHere}
)

// The timers' entries in the default clock's table (counterTable):
// static data, so each names functions of its own.
var (
	rdtimeCounter        = counter{arch: "riscv64", probe: probeRDTIME, verdict: rdtimeVerdict, prepare: prepareReadCost}
	timebaseCounter      = counter{arch: "ppc64le", probe: probeTimeBase, verdict: timebaseVerdict, prepare: prepareReadCost}
	todCounter           = counter{arch: "s390x", probe: probeTOD, verdict: todVerdict, prepare: prepareReadCost}
	stableCounterCounter = counter{arch: "loong64", probe: probeStableCounter, verdict: stableCounterVerdict, prepare: prepareReadCost}
)

func probeRDTIME() (Source, rateOrigin, float64, error)        { return rdtimeTimer.probe() }
func probeTimeBase() (Source, rateOrigin, float64, error)      { return timebaseTimer.probe() }
func probeTOD() (Source, rateOrigin, float64, error)           { return todTimer.probe() }
func probeStableCounter() (Source, rateOrigin, float64, error) { return stableCounterTimer.probe() }
func rdtimeVerdict() kernel.Verdict                            { return clocksourceVerdict(rdtimeTimer.clocksource) }
func timebaseVerdict() kernel.Verdict                          { return clocksourceVerdict(timebaseTimer.clocksource) }
func todVerdict() kernel.Verdict                               { return clocksourceVerdict(todTimer.clocksource) }
func stableCounterVerdict() kernel.Verdict                     { return clocksourceVerdict(stableCounterTimer.clocksource) }

// source returns the counter as a Source: 64 bits, at its stated rate
// checked against a 20 ms measurement (withMeasuredRate), or, where none
// is stated or the counter does not run at it, at a rate measured
// against CLOCK_MONOTONIC_RAW, which blocks for about 200 ms, rounded to
// the nearest Hz; the TOD clock's architected rate is neither measured
// nor checked. Off its GOARCH, in a purego or non-gc build, err wraps
// ErrUnsupported; where a stated rate is unusable, errUntrusted. The
// message says exactly why.
func (t *timer) source() (Source, error) {
	src, origin, _, err := t.probe()
	if err == nil && origin == rateArchitected {
		return src, nil
	}
	return withMeasuredRate(src, origin, err)
}

// probe is source without the measurement: where the rate must be
// measured it returns Rate 0 and rateMeasured.
func (t *timer) probe() (src Source, origin rateOrigin, errPPM float64, err error) {
	if !t.supported {
		return Source{}, 0, 0, format.Errorf("%w %q: %s", ErrUnsupported, t.name, noAsmReason(t.arch))
	}
	rate, origin, errPPM, err := t.rate()
	if err != nil {
		return Source{}, 0, 0, err
	}
	return Source{Name: t.name, Read: t.read(), Bits: timerBits, Rate: rate}, origin, errPPM, nil
}

func rdtimeRateHere() (uint64, rateOrigin, float64, error) {
	return rdtimeRate(sysfile.Read(timebase.DeviceTreePath))
}

func timebaseRateHere() (uint64, rateOrigin, float64, error) {
	return timebaseRate(sysfile.Read(timebase.CPUInfoPath))
}

func todRateHere() (uint64, rateOrigin, float64, error) { return todRate, rateArchitected, 0, nil }

func stableCounterRateHere() (uint64, rateOrigin, float64, error) {
	rate, err := stableCounterRate(hwcounter.CPUCFG)
	return rate, rateCPUCFG, nominalRateErrPPM, err
}

// todRate is the TOD clock's rate, fixed by the architecture: bit 51 of
// the 64-bit clock is one microsecond, so the clock counts 2^12 = 4096
// units per µs, 4.096 GHz, whatever the machine. Only the resolution of
// the bits below bit 51 that a model actually steps varies.
const todRate = 4_096_000_000

// rdtimeRate decides the time CSR's rate from the device tree's
// timebase-frequency property (its content, or the error reading it):
// no property at all means measuring; one that is there but unusable is
// firmware's mistake, and refused rather than papered over.
func rdtimeRate(property []byte, readErr error) (rate uint64, origin rateOrigin, errPPM float64, err error) {
	if errors.Is(readErr, fs.ErrNotExist) {
		return 0, rateMeasured, 0, nil
	}
	if readErr != nil {
		return 0, 0, 0, format.Errorf("%w %q: reading %s: %v", errUntrusted, "rdtime", timebase.DeviceTreePath, readErr)
	}
	rate, err = timebase.DeviceTreeFrequency(property)
	if err != nil {
		return 0, 0, 0, format.Errorf("%w %q: %s: %v", errUntrusted, "rdtime", timebase.DeviceTreePath, err)
	}
	return rate, rateDeviceTree, nominalRateErrPPM, nil
}

// timebaseRate decides the time base's rate from /proc/cpuinfo (its
// content, or the error reading it): no file, or a file without a
// timebase line (another architecture's, under emulation), means
// measuring; a timebase line that is unusable is refused.
func timebaseRate(cpuinfo []byte, readErr error) (rate uint64, origin rateOrigin, errPPM float64, err error) {
	if errors.Is(readErr, fs.ErrNotExist) {
		return 0, rateMeasured, 0, nil
	}
	if readErr != nil {
		return 0, 0, 0, format.Errorf("%w %q: reading %s: %v", errUntrusted, "timebase", timebase.CPUInfoPath, readErr)
	}
	rate, err = timebase.CPUInfoTimebase(cpuinfo)
	switch {
	case errors.Is(err, timebase.ErrNoTimebaseLine):
		return 0, rateMeasured, 0, nil
	case err != nil:
		return 0, 0, 0, format.Errorf("%w %q: %s: %v", errUntrusted, "timebase", timebase.CPUInfoPath, err)
	}
	return rate, rateCPUInfo, nominalRateErrPPM, nil
}

// stableCounterRate reads the counter's rate from CPUCFG leaves 2, 4 and
// 5 through cfg.
func stableCounterRate(cfg func(leaf uint32) uint32) (uint64, error) {
	rate, err := timebase.StableCounterFrequency(cfg(2), cfg(4), cfg(5))
	if err != nil {
		return 0, format.Errorf("%w %q: %v", errUntrusted, "stablecounter", err)
	}
	return rate, nil
}

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
// says 100 MHz, its RDTIME.D reads the host's TSC.
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
		return Source{}, format.Errorf("%w %q: measuring its rate against %s: %v", errUntrusted, src.Name, rawClockName, err)
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
// (an x86 clocksource), so the default clock stays on the portable
// source there.
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
			return src.Name + ": does not run at its stated rate", format.Errorf("%w %q: does not run at the stated %d Hz", errUntrusted, src.Name, src.Rate)
		}
		cost := measureReadCost(src.Read)
		found := format.Sprintf("%s: read %s, portable %s", src.Name, format.Ns(cost.CounterNs), format.Ns(cost.PortableNs))
		if cost.counterSlower() {
			return found + ": slower than the portable source", format.Errorf("%w %q: read %s, slower than the portable source's %s (the counter is trapped?)",
				errUntrusted, src.Name, format.Ns(cost.CounterNs), format.Ns(cost.PortableNs))
		}
		return found, nil
	}
}
