package schedclock

import (
	"runtime"

	"github.com/schedclock/schedclock/internal/format"
	"github.com/schedclock/schedclock/internal/kernel"
)

// A hardware counter is, to the default clock, a descriptor: what it is
// called, how to find it without blocking, where its rate comes from,
// whose word it is trusted on and which checks it must pass. Each
// counter's own file (source_NAME.go) declares its entry, and counters
// lists them in order of preference, as x/sys/cpu lists its features in
// one table: the default clock walks the table and never asks a
// counter's name. Adding a counter is its files and one entry here.
type counter struct {
	// arch is the GOARCH the counter exists on; the walk skips the others.
	arch string
	// probe returns the counter as a Source without blocking (it runs
	// in the default clock's set-up, before its choice): Rate 0 with rateMeasured when the
	// rate must be measured, which the default clock does in the
	// background against CLOCK_MONOTONIC_RAW; or an error wrapping
	// ErrUnsupported or errUntrusted that says why the counter cannot
	// be used.
	probe func() (src Source, origin rateOrigin, errPPM float64, err error)
	// verdict reads the kernel's word on the counter (is its clocksource
	// this counter?), at start and every verdictPeriod for life: the
	// kernel's clocksource watchdog can demote a counter hours after
	// boot. nil where the kernel keeps no watchdog on the counter;
	// noVerdict then says why, for Info.Evidence.Kernel. A counter the kernel
	// runs on is adopted at once, the cross-CPU check a second opinion;
	// one whose verdict cannot be read (no sysfs) only once the
	// cross-CPU check ran and found no warp.
	verdict   func() kernel.Verdict
	noVerdict string
	// evidence, if not nil, is the counter's own evidence, asked with
	// the kernel's verdict for life: "" while it holds, else why not (a
	// paravirtual page whose stable bit cleared).
	evidence func() string
	// prepare, if not nil, runs in the set-up once the counter is chosen
	// (cheaply: the choice waits for it) and returns the Source to use (a read
	// function with a workaround) and the counter's own check, run in the
	// background before the counter's rate is adopted: what it found, for
	// Info.Evidence.CounterCheck, and an error if the counter must not be used.
	prepare func(Source) (Source, func() (found string, err error))
	// describe, if not nil, says what the counter's own evidence shows
	// (the paravirtual page: where, its version and flags), for
	// Info.Evidence.CounterCheck: read at start and with every verdict.
	describe func() string
	// status, if not nil, says what the counter's Source reads when
	// that is not the counter (a paravirtual clock's Source on its
	// fallback; "" while it is the counter), and the history of such
	// times, each with its time ("" while there was none). Info appends
	// the first to Source and the second to CounterCheck, fresh at every
	// call.
	status func() (reading, history string)
}

// counterTable is the default clock's table, in order of preference: the
// entries of this architecture's counters. runtime.GOARCH is a constant,
// so a binary links the probes, parsers and tables of its own machine's
// counters alone (the arm64 errata, the riscv64 device tree, the ppc64le
// cpuinfo parser stay out of an amd64 binary). Each table is static data.
func counterTable() []*counter {
	switch runtime.GOARCH {
	case "amd64":
		return amd64Counters
	case "arm64":
		return arm64Counters
	case "riscv64":
		return riscv64Counters
	case "ppc64le":
		return ppc64leCounters
	case "s390x":
		return s390xCounters
	case "loong64":
		return loong64Counters
	}
	return nil // no counter: the default clock stays on the portable source
}

var (
	amd64Counters   = []*counter{&tscCounter, &pvclockCounter}
	arm64Counters   = []*counter{&cntvctCounter}
	riscv64Counters = []*counter{&rdtimeCounter}
	ppc64leCounters = []*counter{&timebaseCounter}
	s390xCounters   = []*counter{&todCounter}
	loong64Counters = []*counter{&stableCounterCounter}
)

// Hardware returns this machine's counter register as a Source, the
// counter the default clock runs on where it trusts it, read with the
// barriers that order it after earlier loads:
//
//   - amd64: the TSC (LFENCE; RDTSC), offered only where CPUID reports an
//     invariant TSC and the kernel's clocksource, where it can be read, is
//     "tsc";
//   - arm64: the virtual counter CNTVCT_EL0, at the rate in CNTFRQ_EL0;
//   - riscv64: the time CSR; ppc64le: the time base; loong64: the stable
//     counter; s390x: the time-of-day clock, at its architected 4.096 GHz.
//
// The rate is what the CPU or the firmware declares (CPUID leaf 0x15 or
// the hypervisor's leaf, CNTFRQ_EL0, the device tree, /proc/cpuinfo,
// CPUCFG; on riscv64, ppc64le and loong64 checked against a 20 ms
// measurement). Where nothing declares it, Hardware measures it against
// CLOCK_MONOTONIC_RAW, which blocks for about 20 ms (the TSC, unless the
// default clock already measured it) or 200 ms (the others). Give the
// Clock a reference (WithReference) to have the rate refined and the
// counter watched for life, as the default clock does.
//
// On other architectures, in a purego or non-gc build, and where the
// counter cannot be trusted as a clock (no invariant TSC, a kernel on
// another clocksource, a rate of 0), the error wraps ErrUnsupported and
// says exactly why. Portable works everywhere.
func Hardware() (Source, error) {
	switch runtime.GOARCH {
	case "amd64":
		return tscSource()
	case "arm64":
		return cntvctSource()
	case "riscv64":
		return rdtimeTimer.source()
	case "ppc64le":
		return timebaseTimer.source()
	case "s390x":
		return todTimer.source()
	case "loong64":
		return stableCounterTimer.source()
	}
	return Source{}, format.Errorf("%w: no counter register is read on %s", ErrUnsupported, runtime.GOARCH)
}

// choice is what the walk of a table found: the counter to use, or why
// there is none.
type choice struct {
	desc   *counter
	src    Source
	origin rateOrigin
	errPPM float64
	err    error // nil when desc is set
}

// chooseCounter walks table in order and returns the first counter of
// this architecture whose probe succeeds, or every refusal.
func chooseCounter(table []*counter) choice {
	var refusals []error
	for _, d := range table {
		if d.arch != runtime.GOARCH {
			continue
		}
		src, origin, errPPM, err := d.probe()
		if err == nil {
			return choice{desc: d, src: src, origin: origin, errPPM: errPPM}
		}
		refusals = append(refusals, err)
	}
	if len(refusals) == 0 {
		return choice{err: format.Errorf("%w: no hardware counter for GOARCH=%s", ErrUnsupported, runtime.GOARCH)}
	}
	return choice{err: joinRefusals(refusals)}
}

// joinRefusals joins refusals into one error, one clause each, that
// wraps every one of them (errors.Is finds each sentinel).
func joinRefusals(refusals []error) error {
	if len(refusals) == 1 {
		return refusals[0]
	}
	verbs := "%w"
	args := make([]any, len(refusals))
	for i, err := range refusals {
		if i > 0 {
			verbs += "; %w"
		}
		args[i] = err
	}
	return format.Errorf(verbs, args...)
}
