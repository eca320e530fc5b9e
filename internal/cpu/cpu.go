// Package cpu answers what the processor says about its counter: through
// CPUID, whether an x86 CPU has a time-stamp counter, whether it runs at
// a constant rate, at what rate (leaf 0x15 with 0x16, or a hypervisor's
// timing leaf) and whether it has RDTSCP; and whether this process runs
// under user-mode emulation of another architecture. The decisions take
// the CPUID instruction as a parameter, so that tests replay recorded
// leaves on any architecture; CPUID runs it on this CPU.
//
// It says nothing about trust beyond the CPU's word: the kernel's verdict
// on the counter and the cross-CPU check are asked separately, and the
// clock decides.
package cpu

import (
	"bytes"
	"fmt"
	"math/bits"
	"os"
	"runtime"
)

// Func executes CPUID for leaf eax and sub-leaf ecx.
type Func func(eax, ecx uint32) (a, b, c, d uint32)

// CPUID leaves and bits that decide whether the TSC is a clock.
const (
	leafMaxBasic      = 0x0
	leafFeatures      = 0x1
	leafTSCCrystal    = 0x15
	leafProcessorFreq = 0x16
	leafHypervisorMax = 0x40000000
	leafHypervisorTSC = 0x40000010
	leafMaxExtended   = 0x80000000
	leafExtFeatures   = 0x80000001
	leafPowerMgmt     = 0x80000007

	featEDXTSC        = 1 << 4  // leaf 1 EDX: RDTSC exists
	featECXHypervisor = 1 << 31 // leaf 1 ECX: running under a hypervisor
	extEDXRDTSCP      = 1 << 27 // leaf 0x80000001 EDX: RDTSCP exists
	pmEDXInvariantTSC = 1 << 8  // leaf 0x80000007 EDX: constant rate in every P-, C- and T-state
)

// crystalErrPPM is the error reported for a rate computed from the
// nominal crystal frequency of leaf 0x15. The formula is exact, but a real
// quartz crystal sits within some tens of ppm of its nominal value
// (tolerance, temperature, ageing); 50 ppm covers the usual parts. The
// clock refines the rate against its reference in the background anyway.
const crystalErrPPM = 50

// A Refusal says why CPUID does not offer the TSC as a clock.
type Refusal struct {
	// Absent: there is no TSC to read, or no CPUID leaf to say there is.
	// Otherwise there is one, but it is not invariant.
	Absent bool
	Reason string // "no invariant TSC (CPUID 0x80000007 EDX bit 8 clear)", ...
}

// TSC is an invariant time-stamp counter as CPUID describes it; Rate
// reads the leaves that give its rate.
type TSC struct {
	cpuid      Func
	maxBasic   uint32
	hypervisor bool
}

// InvariantTSC checks, in cpuid's leaves, that the CPU has a TSC (leaf 1
// EDX bit 4) and that it is invariant (leaf 0x80000007 EDX bit 8), and
// says why not where it is not.
func InvariantTSC(cpuid Func) (TSC, *Refusal) {
	maxBasic, _, _, _ := cpuid(leafMaxBasic, 0)
	if maxBasic < leafFeatures {
		return TSC{}, &Refusal{Absent: true, Reason: fmt.Sprintf("CPUID leaf 1 not available (max basic leaf %#x)", maxBasic)}
	}
	_, _, featECX, featEDX := cpuid(leafFeatures, 0)
	if featEDX&featEDXTSC == 0 {
		return TSC{}, &Refusal{Absent: true, Reason: "no TSC (CPUID 1 EDX bit 4 clear)"}
	}
	maxExtended, _, _, _ := cpuid(leafMaxExtended, 0)
	if maxExtended < leafPowerMgmt {
		return TSC{}, &Refusal{Reason: fmt.Sprintf("no invariant TSC (CPUID max extended leaf %#x < 0x80000007)", maxExtended)}
	}
	if _, _, _, pmEDX := cpuid(leafPowerMgmt, 0); pmEDX&pmEDXInvariantTSC == 0 {
		return TSC{}, &Refusal{Reason: "no invariant TSC (CPUID 0x80000007 EDX bit 8 clear)"}
	}
	return TSC{cpuid: cpuid, maxBasic: maxBasic, hypervisor: featECX&featECXHypervisor != 0}, nil
}

// RateSource says which CPUID leaf gave the TSC's rate.
type RateSource int

const (
	RateUnknown    RateSource = iota // no leaf gives it: it must be measured
	RateCrystal                      // leaf 0x15 (with 0x16's base frequency when 0x15 has no crystal)
	RateHypervisor                   // the hypervisor timing leaf 0x40000010
)

// Rate returns the TSC's rate in Hz, where it comes from, and the
// worst-case error in ppm of the figure it comes from; 0 and RateUnknown
// when no leaf gives it.
//
// The leaves are tried in the kernel's order (native_calibrate_tsc, then
// the hypervisor's word): leaf 0x15, with the crystal derived from leaf
// 0x16 when 0x15 does not give it; the hypervisor timing leaf
// 0x40000010, only below the hypervisor's max leaf.
func (t TSC) Rate() (hz uint64, from RateSource, errPPM float64) {
	if t.maxBasic >= leafTSCCrystal {
		if rate, errPPM, ok := crystalRate(t.cpuid, t.maxBasic); ok {
			return rate, RateCrystal, errPPM
		}
	}
	if t.hypervisor {
		// Leaves 0x40000000 and up belong to the hypervisor; only
		// those below its max leaf mean anything.
		if maxHypervisor, _, _, _ := t.cpuid(leafHypervisorMax, 0); maxHypervisor >= leafHypervisorTSC {
			if tscKHz, _, _, _ := t.cpuid(leafHypervisorTSC, 0); tscKHz != 0 {
				// The figure is rounded to the kHz: ±500 Hz.
				return uint64(tscKHz) * 1000, RateHypervisor, 0.5e6 / float64(tscKHz)
			}
		}
	}
	return 0, RateUnknown, 0
}

// crystalRate computes the TSC rate from leaf 0x15 (TSC = crystal ×
// EBX/EAX), taking the crystal from leaf 0x16's base frequency when 0x15
// leaves it out, exactly as the kernel's native_calibrate_tsc does, but in
// Hz rather than kHz. It multiplies before it divides and never rounds to
// the MHz. ok is false when the leaves do not enumerate a rate.
func crystalRate(cpuid Func, maxBasic uint32) (rate uint64, errPPM float64, ok bool) {
	denominator, numerator, crystalHz, _ := cpuid(leafTSCCrystal, 0)
	if denominator == 0 || numerator == 0 {
		return 0, 0, false
	}
	crystal := uint64(crystalHz)
	errPPM = crystalErrPPM
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
		// Through int32 (baseMHz is 16 bits): qemu-loongarch64 7.2
		// converts a uint32 in a float register as a signed 64-bit
		// value with garbage above bit 31 (2400 read as 2400 - 2^32).
		errPPM += 0.5e6 / float64(int32(baseMHz))
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

// HasRDTSCP reports CPUID 0x80000001 EDX bit 27 (RDTSCP).
func HasRDTSCP(cpuid Func) bool {
	if maxExtended, _, _, _ := cpuid(leafMaxExtended, 0); maxExtended < leafExtFeatures {
		return false
	}
	_, _, _, edx := cpuid(leafExtFeatures, 0)
	return edx&extEDXRDTSCP != 0
}

// Emulated reports whether this process runs under user-mode emulation
// of another architecture (qemu-aarch64 on an x86 host, as make
// test-arm64 runs the tests): qemu passes the host's /proc/cpuinfo
// through, and only x86 kernels write a vendor_id line in it. Outside
// Linux it reports false.
func Emulated() bool {
	if runtime.GOARCH == "amd64" || runtime.GOARCH == "386" {
		return false
	}
	cpuinfo, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	return bytes.HasPrefix(cpuinfo, []byte("vendor_id\t:")) || bytes.Contains(cpuinfo, []byte("\nvendor_id\t:"))
}
