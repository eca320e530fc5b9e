package schedclock

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/schedclock/schedclock/internal/kernel"
	"github.com/schedclock/schedclock/internal/measure"
	"github.com/schedclock/schedclock/internal/timebase"
)

// The riscv64, ppc64le, s390x and loong64 counters: each is a 64-bit
// counter that every CPU of the machine reads at the same rate from one
// time base, which the kernel uses as its clocksource (and sched_clock)
// under a name of its own; only its instruction and ordering (its
// source_NAME_GOARCH.s says why each), its clocksource's name and the origin
// of its rate differ, which a timer holds as data. The default clock's
// table has GOARCH's, trusted on the kernel's word (its clocksource is
// that counter), which it follows for life, and only where a read costs
// no more than the portable source's (prepareReadCost: some SBI
// implementations trap RDTIME; qemu-loongarch64's counter does not run
// at the CPUCFG rate).

// timer is one of these counters.
type timer struct {
	name, arch  string
	clocksource string // the name the kernel registers it under
	supported   bool
	read        func() func() uint64 // its reader
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
		supported: rdtimeSupported, read: rdtimeReader, rate: rdtimeRateHere}
	// The time base (clocksource_timebase, arch/powerpc/kernel/time.c),
	// at /proc/cpuinfo's timebase line, the kernel's ppc_tb_freq
	// (qemu-user passes the host's file through: none there).
	timebaseTimer = timer{name: "timebase", arch: "ppc64le", clocksource: "timebase",
		supported: timebaseSupported, read: timebaseReader, rate: timebaseRateHere}
	// The TOD clock (clocksource_tod, arch/s390/kernel/time.c), at its
	// architected rate. The architecture keeps the TOD clocks of all
	// CPUs synchronised (the TOD-clock-sync control, and STP across
	// machines), so that a value stored on one CPU is never behind one
	// stored earlier on another: what lets the kernel use it for
	// sched_clock on every CPU without the TSC's cross-CPU checks.
	todTimer = timer{name: "tod", arch: "s390x", clocksource: "tod",
		supported: todSupported, read: todReader, rate: todRateHere}
	// The stable counter (clocksource_const,
	// arch/loongarch/kernel/time.c), at the rate CPUCFG leaves 4 and 5
	// give, as the kernel's calc_const_freq computes it.
	stableCounterTimer = timer{name: "stablecounter", arch: "loong64", clocksource: "Constant",
		supported: stableCounterSupported, read: stableCounterReader, rate: stableCounterRateHere}
)

// The timers' entries in the default clock's table: static data, so each
// names functions of its own.
var (
	rdtimeCounter        = descriptor{Arch: "riscv64", Probe: probeRDTIME, Verdict: rdtimeVerdict, Prepare: prepareReadCost}
	timebaseCounter      = descriptor{Arch: "ppc64le", Probe: probeTimeBase, Verdict: timebaseVerdict, Prepare: prepareReadCost}
	todCounter           = descriptor{Arch: "s390x", Probe: probeTOD, Verdict: todVerdict, Prepare: prepareReadCost}
	stableCounterCounter = descriptor{Arch: "loong64", Probe: probeStableCounter, Verdict: stableCounterVerdict, Prepare: prepareReadCost}
)

// The timers' probes: each returns its counter as a Source, 64 bits, at
// the rate its firmware or its architecture states, with the origin and
// error of that figure; where none is stated, Rate 0 and rateMeasured.
// Off its GOARCH, in a purego or non-gc build, err wraps ErrUnsupported;
// where a stated rate is unusable, errUntrusted. The message says
// exactly why.
func probeRDTIME() (Source, rateOrigin, float64, error)        { return rdtimeTimer.probe() }
func probeTimeBase() (Source, rateOrigin, float64, error)      { return timebaseTimer.probe() }
func probeTOD() (Source, rateOrigin, float64, error)           { return todTimer.probe() }
func probeStableCounter() (Source, rateOrigin, float64, error) { return stableCounterTimer.probe() }
func rdtimeVerdict() kernel.Verdict                            { return clocksourceVerdict(rdtimeTimer.clocksource) }
func timebaseVerdict() kernel.Verdict                          { return clocksourceVerdict(timebaseTimer.clocksource) }
func todVerdict() kernel.Verdict                               { return clocksourceVerdict(todTimer.clocksource) }
func stableCounterVerdict() kernel.Verdict                     { return clocksourceVerdict(stableCounterTimer.clocksource) }

// probe is the timer's Probe.
func (t *timer) probe() (src Source, origin rateOrigin, errPPM float64, err error) {
	if !t.supported {
		return Source{}, 0, 0, fmt.Errorf("%w %q: %s", ErrUnsupported, t.name, noAsmReason(t.arch))
	}
	rate, origin, errPPM, err := t.rate()
	if err != nil {
		return Source{}, 0, 0, err
	}
	return Source{Name: t.name, Read: t.read(), Bits: timerBits, Rate: rate}, origin, errPPM, nil
}

func rdtimeRateHere() (uint64, rateOrigin, float64, error) {
	return rdtimeRate(os.ReadFile(timebase.DeviceTreePath))
}

func timebaseRateHere() (uint64, rateOrigin, float64, error) {
	return timebaseRate(os.ReadFile(timebase.CPUInfoPath))
}

func todRateHere() (uint64, rateOrigin, float64, error) { return todRate, rateArchitected, 0, nil }

func stableCounterRateHere() (uint64, rateOrigin, float64, error) {
	rate, err := stableCounterRate(cpucfg)
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
		return 0, 0, 0, fmt.Errorf("%w %q: reading %s: %v", errUntrusted, "rdtime", timebase.DeviceTreePath, readErr)
	}
	rate, err = timebase.DeviceTreeFrequency(property)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("%w %q: %s: %v", errUntrusted, "rdtime", timebase.DeviceTreePath, err)
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
		return 0, 0, 0, fmt.Errorf("%w %q: reading %s: %v", errUntrusted, "timebase", timebase.CPUInfoPath, readErr)
	}
	rate, err = timebase.CPUInfoTimebase(cpuinfo)
	switch {
	case errors.Is(err, timebase.ErrNoTimebaseLine):
		return 0, rateMeasured, 0, nil
	case err != nil:
		return 0, 0, 0, fmt.Errorf("%w %q: %s: %v", errUntrusted, "timebase", timebase.CPUInfoPath, err)
	}
	return rate, rateCPUInfo, nominalRateErrPPM, nil
}

// stableCounterRate reads the counter's rate from CPUCFG leaves 2, 4 and
// 5 through cfg.
func stableCounterRate(cfg func(leaf uint32) uint32) (uint64, error) {
	rate, err := timebase.StableCounterFrequency(cfg(2), cfg(4), cfg(5))
	if err != nil {
		return 0, fmt.Errorf("%w %q: %v", errUntrusted, "stablecounter", err)
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
func prepareReadCost(src Source) (Source, func(measures) (string, error)) {
	return src, func(m measures) (string, error) {
		if src.Rate != 0 && !statedRateHolds(src, m.Rate) {
			return src.Name + ": does not run at its stated rate", fmt.Errorf("%w %q: does not run at the stated %d Hz", errUntrusted, src.Name, src.Rate)
		}
		cost := measureReadCost(src.Read, m.Portable)
		found := fmt.Sprintf("%s: read %s, portable %s", src.Name, measure.Ns(cost.CounterNs), measure.Ns(cost.PortableNs))
		if cost.counterSlower() {
			return found + ": slower than the portable source", fmt.Errorf("%w %q: read %s, slower than the portable source's %s (the counter is trapped?)",
				errUntrusted, src.Name, measure.Ns(cost.CounterNs), measure.Ns(cost.PortableNs))
		}
		return found, nil
	}
}
