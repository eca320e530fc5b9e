package schedclock

import (
	"errors"
	"math"
	"runtime"
	"time"

	"github.com/schedclock/schedclock/internal/format"
	"github.com/schedclock/schedclock/internal/hwcounter"
	"github.com/schedclock/schedclock/internal/pvclock"
)

// A hardware counter is, to the default clock, a descriptor
// (internal/hwcounter's Counter: what it is called, how to find it
// without blocking, where its rate comes from, whose word it is trusted
// on and which checks it must pass). Each counter's descriptor is in
// internal/hwcounter beside its reader, but for the paravirtual clock's
// (source_pvclock.go), and counterTable lists them in order of
// preference, as x/sys/cpu lists its features in one table: the default
// clock walks the table and never asks a counter's name. Adding a
// counter is its files and one entry here.

// counterTable is the default clock's table, in order of preference: the
// entries of this architecture's counters. runtime.GOARCH is a constant,
// so a binary links the probes, parsers and tables of its own machine's
// counters alone (the arm64 errata, the riscv64 device tree, the ppc64le
// cpuinfo parser stay out of an amd64 binary). Each table is static data.
func counterTable() []*hwcounter.Counter {
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
	amd64Counters   = []*hwcounter.Counter{&hwcounter.TSCCounter, &pvclockCounter}
	arm64Counters   = []*hwcounter.Counter{&hwcounter.CNTVCTCounter}
	riscv64Counters = []*hwcounter.Counter{&hwcounter.RDTIMECounter}
	ppc64leCounters = []*hwcounter.Counter{&hwcounter.TimeBaseCounter}
	s390xCounters   = []*hwcounter.Counter{&hwcounter.TODCounter}
	loong64Counters = []*hwcounter.Counter{&hwcounter.StableCounterCounter}
)

// counterMeasures are what the counters' own checks (their descriptors'
// Prepare) measure with: the portable source's read, and rates against
// this package's raw clock. amd64's counters have no such check, and an
// amd64 binary does not link the measurement (time.Sleep and all).
func counterMeasures() hwcounter.Measures {
	if runtime.GOARCH == "amd64" {
		return hwcounter.Measures{}
	}
	return hwcounter.Measures{Portable: readMono, Rate: measureRate}
}

// sourceOf is a descriptor's Source as this package's.
func sourceOf(s hwcounter.Source) Source {
	return Source{Name: s.Name, Read: s.Read, Bits: s.Bits, Rate: s.Rate}
}

// counterSource is src as a descriptor's.
func counterSource(src Source) hwcounter.Source {
	return hwcounter.Source{Name: src.Name, Read: src.Read, Bits: src.Bits, Rate: src.Rate}
}

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
		src, _, _, err := hwcounter.ProbeCNTVCT()
		return sourceOf(src), err
	case "riscv64":
		return withMeasuredRate(hwcounter.ProbeRDTIME())
	case "ppc64le":
		return withMeasuredRate(hwcounter.ProbeTimeBase())
	case "s390x":
		return withMeasuredRate(hwcounter.ProbeTOD())
	case "loong64":
		return withMeasuredRate(hwcounter.ProbeStableCounter())
	}
	return Source{}, format.Errorf("%w: no counter register is read on %s", ErrUnsupported, runtime.GOARCH)
}

// tscMeasureTime is how long Hardware measures the TSC's rate when no
// CPUID leaf gives it.
const tscMeasureTime = 20 * time.Millisecond

// tscSource is Hardware on amd64: the TSC at the rate CPUID gives, else
// the rate the default clock measured and refined for the TSC (or took
// from the kernel's conversion), or,
// before the default clock runs on it, a measurement of tscMeasureTime
// rounded to the nearest Hz.
func tscSource() (Source, error) {
	probed, origin, _, err := hwcounter.ProbeTSC()
	if err != nil {
		return Source{}, err
	}
	src := sourceOf(probed)
	if origin == hwcounter.RateMeasured {
		// The default clock measures and refines the same counter in the
		// background; once it runs on it, its rate is the best there is.
		if in := Default().Info(); in.Source == src.Name && (in.RateOrigin == hwcounter.RateMeasured.String() ||
			in.RateOrigin == hwcounter.RateRefined.String() || in.RateOrigin == hwcounter.RateKernel.String()) {
			src.Rate = in.Rate
			return src, nil
		}
		hz, _, err := measureRate(src.Read, tscMeasureTime)
		if err != nil {
			return Source{}, format.Errorf("%w %q: measuring its rate against %s: %v", errUntrusted, "tsc", rawClockName, err)
		}
		src.Rate = uint64(math.Round(hz))
	}
	return src, nil
}

// timerMeasureTime is how long Hardware measures a timer counter's rate
// against CLOCK_MONOTONIC_RAW where no firmware figure gives it
// (qemu-user has no device tree and passes the host's /proc/cpuinfo
// through): 200 ms keeps the measurement's error within some 10 ppm
// under emulation, where each bracketing read of the reference costs a
// microsecond or two.
const timerMeasureTime = 200 * time.Millisecond

// withMeasuredRate completes what a timer counter's probe returned: the
// TOD clock's architected rate as it is; where the probe found no rate
// (origin RateMeasured, Rate 0), or where the counter does not run at
// the rate firmware stated (hwcounter.StatedRateHolds, which costs
// 20 ms), it measures the rate, which blocks for timerMeasureTime, and
// rounds it to the nearest Hz.
func withMeasuredRate(probed hwcounter.Source, origin hwcounter.RateOrigin, _ float64, err error) (Source, error) {
	if err != nil {
		return Source{}, err
	}
	src := sourceOf(probed)
	if origin == hwcounter.RateArchitected || origin != hwcounter.RateMeasured && hwcounter.StatedRateHolds(probed, measureRate) {
		return src, nil
	}
	hz, _, err := measureRate(src.Read, timerMeasureTime)
	if err != nil {
		return Source{}, format.Errorf("%w %q: measuring its rate against %s: %v", errUntrusted, src.Name, rawClockName, err)
	}
	src.Rate = uint64(math.Round(hz))
	return src, nil
}

// choice is what the walk of a table found: the counter to use, or why
// there is none.
type choice struct {
	desc   *hwcounter.Counter
	src    Source
	origin hwcounter.RateOrigin
	errPPM float64
	err    error // nil when desc is set
}

// chooseCounter walks table in order and returns the first counter of
// this architecture whose probe succeeds, or every refusal.
func chooseCounter(table []*hwcounter.Counter) choice {
	var refusals []error
	for _, d := range table {
		if d.Arch != runtime.GOARCH {
			continue
		}
		src, origin, errPPM, err := d.Probe()
		if err == nil {
			return choice{desc: d, src: sourceOf(src), origin: origin, errPPM: errPPM}
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

// kernelConv is the kernel's own conversion of a counter it runs on:
// its raw clock's mult and shift (CLOCK_MONOTONIC_RAW is the counter
// through them), as the conversion of a 64-bit counter, and the rate in
// Hz they make, 1e9·2^shift/mult. The default clock converts with it
// where the kernel runs on its counter (hwcounter.RateKernel): its
// readings then run at CLOCK_MONOTONIC_RAW's pace to the ns, and there
// is no rate to refine.
type kernelConv struct {
	conv conversion
	hz   float64
}

// kernelConvTries bounds readKernelConversion's tries at the time data
// while the kernel writes it, and at a check that a timekeeping update
// or a preemption spoiled.
const kernelConvTries = 64

// readKernelConversion reads the kernel's conversion of the counter that
// read reads, in vDSO clock mode mode, from the vDSO's time data: it
// refuses, saying why, where there is no time data or none this package
// can place, where the kernel's vDSO converts another counter now, and
// where the conversion of a counter value read between two reads of
// CLOCK_MONOTONIC_RAW does not fall between them (to the ns both round
// to): the counter's rate then comes from its descriptor, as elsewhere.
func readKernelConversion(mode int32, read func() uint64) (kernelConv, error) {
	k := kernelTicks.get()
	if k.td == nil {
		return kernelConv{}, errors.New("no vDSO time data in this process")
	}
	l, ok := k.td.Layout(k.coarse)
	if !ok {
		return kernelConv{}, errors.New("the vDSO's time data is in a layout this package does not know")
	}
	return kernelConversionOf(k.td, l, mode, read, rawNow)
}

// kernelConversionOf is readKernelConversion on the time data td, of
// layout l, checked against the raw clock raw.
func kernelConversionOf(td *pvclock.TimeData, l pvclock.Layout, mode int32, read func() uint64, raw func() int64) (kernelConv, error) {
	why := "no raw clock base in the kernel's time data, or the kernel kept writing it"
	for range kernelConvTries {
		r, ok := td.Raw(l)
		if !ok {
			continue
		}
		if r.Mode != mode {
			return kernelConv{}, format.Errorf("the kernel's vDSO converts clock mode %d, not %d", r.Mode, mode)
		}
		before := raw()
		at := r.At(read())
		after := raw()
		if at < before-1 || at > after+1 {
			why = format.Sprintf("its raw conversion (mult %d, shift %d) put a reading %d ns from [%d, %d] of %s", r.Mult, r.Shift, max(before-at, at-after), before, after, rawClockName)
			continue
		}
		return kernelConv{conv: conversion{mult: r.Mult, shift: r.Shift, mask: ^uint64(0)}, hz: math.Ldexp(1e9, int(r.Shift)) / float64(r.Mult)}, nil
	}
	return kernelConv{}, errors.New(why)
}
