package schedclock

import (
	"math"
	"time"

	"github.com/schedclock/schedclock/internal/cpu"
	"github.com/schedclock/schedclock/internal/format"
	"github.com/schedclock/schedclock/internal/hwcounter"
	"github.com/schedclock/schedclock/internal/kernel"
)

// tscRate decides whether the TSC can be trusted and where its rate comes from.
// clocksource is the content of /sys/devices/system/clocksource/clocksource0/current_clocksource
// ("" when the file does not exist: then only CPUID is checked).
// It returns rate 0 with origin rateMeasured and a nil error when the TSC is trusted but its rate must be measured.
//
// CPUID is asked first (internal/cpu: a TSC, invariant), then the
// kernel, then CPUID again for the rate (leaf 0x15 with 0x16, the
// hypervisor timing leaf), so that a refusal names the first reason in
// that order. errPPM is the worst-case error of the figure the rate
// comes from.
func tscRate(cpuid cpu.Func, clocksource string) (rate uint64, origin rateOrigin, errPPM float64, err error) {
	tsc, refusal := cpu.InvariantTSC(cpuid)
	if refusal != nil {
		sentinel := errUntrusted
		if refusal.Absent {
			sentinel = ErrUnsupported
		}
		return 0, 0, 0, format.Errorf("%w %q: %s", sentinel, "tsc", refusal.Reason)
	}
	if cs := kernel.TrimSpace(clocksource); cs != "" && cs != "tsc" {
		return 0, 0, 0, format.Errorf("%w %q: kernel clocksource is %s, not tsc", errUntrusted, "tsc", cs)
	}
	rate, from, errPPM := tsc.Rate()
	switch from {
	case cpu.RateCrystal:
		return rate, rateCPUID, errPPM, nil
	case cpu.RateHypervisor:
		return rate, rateHypervisor, errPPM, nil
	}
	return 0, rateMeasured, 0, nil
}

// tscCounter is the TSC's entry in the default clock's table: trusted on
// the kernel's word (its clocksource is tsc), which it follows for life.
var tscCounter = counter{arch: "amd64", probe: probeTSC, verdict: kernel.TSCVerdict}

// tscMeasureTime is how long TSC measures the rate when no CPUID leaf
// gives it.
const tscMeasureTime = 20 * time.Millisecond

// TSC returns the x86 time-stamp counter as a Source: 64 bits, read with
// LFENCE; RDTSC so that it is ordered after earlier loads.
//
// It is offered only where it is a clock: CPUID must report an invariant
// TSC (leaf 0x80000007 EDX bit 8) and, where
// /sys/devices/system/clocksource/clocksource0/current_clocksource exists,
// the kernel must be using "tsc" too. The rate comes from CPUID leaf 0x15
// (with 0x16), else from the hypervisor timing leaf 0x40000010; only when
// neither gives it does TSC take the rate the default clock measured and
// refined for the TSC, or, before the default clock runs on it (about
// 20 ms after start), measure it against CLOCK_MONOTONIC_RAW, which
// blocks for about 20 ms, rounded to the nearest Hz.
//
// Off amd64, in a purego or non-gc build, or where the TSC cannot be
// trusted, err wraps ErrUnsupported or errUntrusted and says exactly why
// not.
func tscSource() (Source, error) {
	src, origin, _, err := probeTSC()
	if err != nil {
		return Source{}, err
	}
	if origin == rateMeasured {
		// The default clock measures and refines the same counter in the
		// background; once it runs on it, its rate is the best there is.
		if in := Default().Info(); in.Source == src.Name && (in.RateOrigin == rateMeasured.String() || in.RateOrigin == rateRefined.String()) {
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

// probeTSC is TSC without the measurement: when the rate must be measured
// it returns Rate 0 and rateMeasured. It costs a few CPUIDs and one small
// file read, so the default clock's set-up calls it without blocking.
func probeTSC() (src Source, origin rateOrigin, errPPM float64, err error) {
	if !hwcounter.TSCSupported {
		return Source{}, 0, 0, format.Errorf("%w %q: %s", ErrUnsupported, "tsc", noAsmReason("amd64"))
	}
	rate, origin, errPPM, err := tscRate(cpu.CPUID, kernel.Clocksource())
	if err != nil {
		return Source{}, 0, 0, err
	}
	return Source{Name: "tsc", Read: hwcounter.TSC(), Bits: 64, Rate: rate}, origin, errPPM, nil
}
