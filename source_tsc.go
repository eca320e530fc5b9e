package schedclock

import (
	"fmt"
	"strings"

	"github.com/schedclock/schedclock/internal/cpu"
	"github.com/schedclock/schedclock/internal/kernel"
)

// tscCounter is the TSC's entry in the default clock's table: trusted on
// the kernel's word (its clocksource is tsc), which it follows for life,
// and converted as the kernel converts it where it runs on it.
var tscCounter = descriptor{Arch: "amd64", Probe: probeTSC, Verdict: kernel.TSCVerdict, VDSOMode: vdsoModeTSC}

// vdsoModeTSC is x86's VDSO_CLOCKMODE_TSC: the vDSO's time data converts
// the TSC.
const vdsoModeTSC = 1

// probeTSC returns the x86 time-stamp counter as a Source: 64 bits, read
// with LFENCE; RDTSC (TSC). It is offered only where it is a clock (see
// tscRate), at the rate CPUID gives; where none does, Rate 0 and
// rateMeasured. It costs a few CPUIDs and one small file read, so the
// default clock's set-up calls it without blocking.
func probeTSC() (src Source, origin rateOrigin, errPPM float64, err error) {
	if !tscSupported {
		return Source{}, 0, 0, fmt.Errorf("%w %q: %s", ErrUnsupported, "tsc", noAsmReason("amd64"))
	}
	rate, origin, errPPM, err := tscRate(cpu.CPUID, kernel.Clocksource())
	if err != nil {
		return Source{}, 0, 0, err
	}
	return Source{Name: "tsc", Read: tscReader(), Bits: 64, Rate: rate}, origin, errPPM, nil
}

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
		return 0, 0, 0, fmt.Errorf("%w %q: %s", sentinel, "tsc", refusal.Reason)
	}
	if cs := strings.TrimSpace(clocksource); cs != "" && cs != "tsc" {
		return 0, 0, 0, fmt.Errorf("%w %q: kernel clocksource is %s, not tsc", errUntrusted, "tsc", cs)
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
