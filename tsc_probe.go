package schedclock

import (
	"fmt"
	"math"
	"math/bits"
	"os"
	"strings"
	"time"
)

// cpuidFunc executes CPUID for leaf eax and sub-leaf ecx. The decision
// logic takes it as a parameter so that tests can replay recorded leaves
// on any architecture.
type cpuidFunc func(eax, ecx uint32) (a, b, c, d uint32)

// CPUID leaves and bits that decide whether the TSC is a clock.
const (
	leafMaxBasic      = 0x0
	leafFeatures      = 0x1
	leafTSCCrystal    = 0x15
	leafProcessorFreq = 0x16
	leafHypervisorMax = 0x40000000
	leafHypervisorTSC = 0x40000010
	leafMaxExtended   = 0x80000000
	leafPowerMgmt     = 0x80000007

	featEDXTSC        = 1 << 4  // leaf 1 EDX: RDTSC exists
	featECXHypervisor = 1 << 31 // leaf 1 ECX: running under a hypervisor
	pmEDXInvariantTSC = 1 << 8  // leaf 0x80000007 EDX: constant rate in every P-, C- and T-state
)

// cpuidCrystalErrPPM is the error reported for a rate computed from the
// nominal crystal frequency of leaf 0x15. The formula is exact, but a real
// quartz crystal sits within some tens of ppm of its nominal value
// (tolerance, temperature, ageing); 50 ppm covers the usual parts. The
// rate is refined against CLOCK_MONOTONIC_RAW in the background anyway.
const cpuidCrystalErrPPM = 50

// clocksourcePath names the kernel's current clocksource. The kernel
// demotes the TSC (to hpet, acpi_pm, kvm-clock, ...) when its watchdog
// sees it drift or stop, something CPUID cannot know.
const clocksourcePath = "/sys/devices/system/clocksource/clocksource0/current_clocksource"

// readClocksource returns the kernel's current clocksource, or "" where
// the file does not exist or cannot be read (not Linux, no sysfs).
func readClocksource() string {
	content, err := os.ReadFile(clocksourcePath)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(content))
}

// tscRate decides whether the TSC can be trusted and where its rate comes from.
// clocksource is the content of /sys/devices/system/clocksource/clocksource0/current_clocksource
// ("" when the file does not exist: then only CPUID is checked).
// It returns rate 0 with origin RateMeasured and a nil error when the TSC is trusted but its rate must be measured.
//
// The rate sources are tried in the kernel's order (native_calibrate_tsc,
// then the hypervisor's word): leaf 0x15, with the crystal derived from
// leaf 0x16 when 0x15 does not give it; the hypervisor timing leaf
// 0x40000010; else measurement. errPPM is the worst-case error of the
// figure the rate comes from.
func tscRate(cpuid cpuidFunc, clocksource string) (rate uint64, origin RateOrigin, errPPM float64, err error) {
	maxBasic, _, _, _ := cpuid(leafMaxBasic, 0)
	if maxBasic < leafFeatures {
		return 0, 0, 0, fmt.Errorf("%w %q: CPUID leaf 1 not available (max basic leaf %#x)", ErrUnsupported, "tsc", maxBasic)
	}
	_, _, featECX, featEDX := cpuid(leafFeatures, 0)
	if featEDX&featEDXTSC == 0 {
		return 0, 0, 0, fmt.Errorf("%w %q: no TSC (CPUID 1 EDX bit 4 clear)", ErrUnsupported, "tsc")
	}
	maxExtended, _, _, _ := cpuid(leafMaxExtended, 0)
	if maxExtended < leafPowerMgmt {
		return 0, 0, 0, fmt.Errorf("%w %q: no invariant TSC (CPUID max extended leaf %#x < 0x80000007)", ErrUntrusted, "tsc", maxExtended)
	}
	if _, _, _, pmEDX := cpuid(leafPowerMgmt, 0); pmEDX&pmEDXInvariantTSC == 0 {
		return 0, 0, 0, fmt.Errorf("%w %q: no invariant TSC (CPUID 0x80000007 EDX bit 8 clear)", ErrUntrusted, "tsc")
	}
	if cs := strings.TrimSpace(clocksource); cs != "" && cs != "tsc" {
		return 0, 0, 0, fmt.Errorf("%w %q: kernel clocksource is %s, not tsc", ErrUntrusted, "tsc", cs)
	}

	if maxBasic >= leafTSCCrystal {
		if rate, errPPM, ok := crystalRate(cpuid, maxBasic); ok {
			return rate, RateCPUID, errPPM, nil
		}
	}
	if featECX&featECXHypervisor != 0 {
		// Leaves 0x40000000 and up belong to the hypervisor; only
		// those below its max leaf mean anything.
		if maxHypervisor, _, _, _ := cpuid(leafHypervisorMax, 0); maxHypervisor >= leafHypervisorTSC {
			if tscKHz, _, _, _ := cpuid(leafHypervisorTSC, 0); tscKHz != 0 {
				// The figure is rounded to the kHz: ±500 Hz.
				return uint64(tscKHz) * 1000, RateHypervisor, 0.5e6 / float64(tscKHz), nil
			}
		}
	}
	return 0, RateMeasured, 0, nil
}

// crystalRate computes the TSC rate from leaf 0x15 (TSC = crystal ×
// EBX/EAX), taking the crystal from leaf 0x16's base frequency when 0x15
// leaves it out, exactly as the kernel's native_calibrate_tsc does, but in
// Hz rather than kHz. It multiplies before it divides and never rounds to
// the MHz. ok is false when the leaves do not enumerate a rate.
func crystalRate(cpuid cpuidFunc, maxBasic uint32) (rate uint64, errPPM float64, ok bool) {
	denominator, numerator, crystalHz, _ := cpuid(leafTSCCrystal, 0)
	if denominator == 0 || numerator == 0 {
		return 0, 0, false
	}
	crystal := uint64(crystalHz)
	errPPM = cpuidCrystalErrPPM
	if crystal == 0 {
		if maxBasic < leafProcessorFreq {
			return 0, 0, false
		}
		baseMHz, _, _, _ := cpuid(leafProcessorFreq, 0)
		baseMHz &= 0xffff // bits 31:16 are reserved
		if baseMHz == 0 {
			return 0, 0, false
		}
		// crystal = base × denominator / numerator. The truncation
		// loses under 1 Hz of crystal; the base frequency itself is
		// given to the MHz, which adds up to 0.5 MHz of error.
		crystal, ok = mulDiv(uint64(baseMHz)*1_000_000, uint64(denominator), uint64(numerator))
		if !ok || crystal == 0 {
			return 0, 0, false
		}
		errPPM += 0.5e6 / float64(baseMHz)
	}
	rate, ok = mulDiv(crystal, uint64(numerator), uint64(denominator))
	if !ok || rate == 0 {
		return 0, 0, false
	}
	return rate, errPPM, true
}

// mulDiv returns a*b/c computed with a 128-bit product; ok is false when
// c is 0 or the quotient does not fit 64 bits.
func mulDiv(a, b, c uint64) (q uint64, ok bool) {
	hi, lo := bits.Mul64(a, b)
	if c == 0 || hi >= c {
		return 0, false
	}
	q, _ = bits.Div64(hi, lo, c)
	return q, true
}

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
// trusted, err wraps ErrUnsupported or ErrUntrusted and says exactly why
// not.
func TSC() (Source, error) {
	src, origin, _, err := probeTSC()
	if err != nil {
		return Source{}, err
	}
	if origin == RateMeasured {
		// The default clock measures and refines the same counter in the
		// background; once it runs on it, its rate is the best there is.
		if in := Default().Info(); in.Source == src.Name && (in.RateOrigin == RateMeasured || in.RateOrigin == RateRefined) {
			src.Rate = in.Rate
			return src, nil
		}
		hz, _, err := measureRate(src.Read, tscMeasureTime)
		if err != nil {
			return Source{}, fmt.Errorf("%w %q: measuring its rate against %s: %v", ErrUntrusted, "tsc", rawClockName, err)
		}
		src.Rate = uint64(math.Round(hz))
	}
	return src, nil
}

// probeTSC is TSC without the measurement: when the rate must be measured
// it returns Rate 0 and RateMeasured. It costs a few CPUIDs and one small
// file read, so the default clock can call it during package
// initialisation.
func probeTSC() (src Source, origin RateOrigin, errPPM float64, err error) {
	if !tscSupported {
		return Source{}, 0, 0, fmt.Errorf("%w %q: %s", ErrUnsupported, "tsc", tscUnsupportedReason())
	}
	rate, origin, errPPM, err := tscRate(hostCPUID, readClocksource())
	if err != nil {
		return Source{}, 0, 0, err
	}
	return Source{Name: "tsc", Read: tscReader(), Bits: 64, Rate: rate}, origin, errPPM, nil
}
