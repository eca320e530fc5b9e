package hwcounter

import (
	"github.com/schedclock/schedclock/internal/cpu"
	"github.com/schedclock/schedclock/internal/format"
	"github.com/schedclock/schedclock/internal/kernel"
)

// TSCCounter is the TSC's entry in the default clock's table: trusted on
// the kernel's word (its clocksource is tsc), which it follows for life,
// and converted as the kernel converts it where it runs on it.
var TSCCounter = Counter{Arch: "amd64", Probe: ProbeTSC, Verdict: kernel.TSCVerdict, VDSOMode: VDSOModeTSC}

// VDSOModeTSC is x86's VDSO_CLOCKMODE_TSC: the vDSO's time data converts
// the TSC.
const VDSOModeTSC = 1

// ProbeTSC returns the x86 time-stamp counter as a Source: 64 bits, read
// with LFENCE; RDTSC (TSC). It is offered only where it is a clock (see
// tscRate), at the rate CPUID gives; where none does, Rate 0 and
// RateMeasured. It costs a few CPUIDs and one small file read, so the
// default clock's set-up calls it without blocking.
func ProbeTSC() (src Source, origin RateOrigin, errPPM float64, err error) {
	if !TSCSupported {
		return Source{}, 0, 0, format.Errorf("%w %q: %s", ErrUnsupported, "tsc", NoAsmReason("amd64"))
	}
	rate, origin, errPPM, err := tscRate(cpu.CPUID, kernel.Clocksource())
	if err != nil {
		return Source{}, 0, 0, err
	}
	return Source{Name: "tsc", Read: TSC(), Bits: 64, Rate: rate}, origin, errPPM, nil
}

// tscRate decides whether the TSC can be trusted and where its rate comes from.
// clocksource is the content of /sys/devices/system/clocksource/clocksource0/current_clocksource
// ("" when the file does not exist: then only CPUID is checked).
// It returns rate 0 with origin RateMeasured and a nil error when the TSC is trusted but its rate must be measured.
//
// CPUID is asked first (internal/cpu: a TSC, invariant), then the
// kernel, then CPUID again for the rate (leaf 0x15 with 0x16, the
// hypervisor timing leaf), so that a refusal names the first reason in
// that order. errPPM is the worst-case error of the figure the rate
// comes from.
func tscRate(cpuid cpu.Func, clocksource string) (rate uint64, origin RateOrigin, errPPM float64, err error) {
	tsc, refusal := cpu.InvariantTSC(cpuid)
	if refusal != nil {
		sentinel := ErrUntrusted
		if refusal.Absent {
			sentinel = ErrUnsupported
		}
		return 0, 0, 0, format.Errorf("%w %q: %s", sentinel, "tsc", refusal.Reason)
	}
	if cs := kernel.TrimSpace(clocksource); cs != "" && cs != "tsc" {
		return 0, 0, 0, format.Errorf("%w %q: kernel clocksource is %s, not tsc", ErrUntrusted, "tsc", cs)
	}
	rate, from, errPPM := tsc.Rate()
	switch from {
	case cpu.RateCrystal:
		return rate, RateCPUID, errPPM, nil
	case cpu.RateHypervisor:
		return rate, RateHypervisor, errPPM, nil
	}
	return 0, RateMeasured, 0, nil
}
