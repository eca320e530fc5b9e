package schedclock

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"time"
)

// The arithmetic of kernel/time/clocksource.c, for converting counter
// cycles to nanoseconds as (cycles*mult) >> shift.
//
// The kernel's sched_clock picks mult and shift with maxsec 3600, so that
// an hour of cycles times mult fits 64 bits and a CPU wakes to fold the
// counter once an hour. That costs precision: one unit of a mult chosen
// so is 0.55 ppm at 2.3 GHz. Here mult and shift are chosen for
// precision instead, within what a frugal refresh
// allows: the largest shift whose mult fits 32 bits and still leaves at
// least eight seconds of cycles before delta*mult overflows, so the
// refresh period, half of that, is four seconds or more. A fold is one
// goroutine wake-up, and a wake-up costs CPU (docs/default-clock.md
// measures it): four seconds keeps an idle process's wake-ups rare
// while mult keeps at least 29 significant bits, so its rounding stays
// below 0.002 ppm for every rate from 1 Hz to 10 GHz
// (TestMultShiftPrecision). A refresh later than the overflow horizon
// only sends readers to the 128-bit path.

// minOverflowHorizon is how long a counter may run past its epoch before
// delta*mult overflows 64 bits: twice the shortest refresh period of a
// counter that does not wrap first.
const minOverflowHorizon = 8 * time.Second

// multShift returns the conversion of a counter counting at rate Hz with
// the given mask: the largest shift (below 64) whose mult, rate's period
// in 2^-shift ns rounded to the nearest, fits 32 bits and leaves
// min(minOverflowHorizon, the wrap) of cycles before delta*mult overflows
// 64 bits. ok is false when no shift does (absurdly high rates).
//
// mult is exact to the last unit for a whole rate in Hz, computed in
// 128 bits; a fractional rate (a measured one) goes through float64,
// whose rounding is far below any measurement's error.
func multShift(rate float64, mask uint64) (mult, shift uint32, ok bool) {
	if !(rate >= 1) || rate > 1<<62 {
		return 0, 0, false
	}
	horizon := float64(minOverflowHorizon) / 1e9 * rate // cycles
	if float64(mask) < horizon {
		horizon = float64(mask)
	}
	for s := 63; s >= 0; s-- {
		m := periodFixed(rate, uint32(s))
		if m == 0 || m > 1<<32-1 {
			continue
		}
		if float64(^uint64(0)/m) >= horizon {
			return uint32(m), uint32(s), true
		}
	}
	return 0, 0, false
}

// periodFixed returns round(1e9 * 2^shift / rate), or 0 if it does not
// fit 64 bits.
func periodFixed(rate float64, shift uint32) uint64 {
	if whole := uint64(rate); float64(whole) == rate {
		// (1e9<<shift + rate/2) / rate in 128 bits.
		hi, lo := uint64(1e9)>>(63-shift)>>1, uint64(1e9)<<shift
		lo, carry := bits.Add64(lo, whole/2, 0)
		hi += carry
		if hi >= whole {
			return 0
		}
		q, _ := bits.Div64(hi, lo, whole)
		return q
	}
	f := math.Round(math.Ldexp(1e9, int(shift)) / rate)
	if f >= 1<<64 {
		return 0
	}
	return uint64(f)
}

// conversion is a counter's fixed-point rate: ns = cycles*mult >> shift.
type conversion struct {
	mult  uint32
	shift uint32
	mask  uint64
}

// newConversion validates src and derives its conversion, refusing
// counters that the refresh goroutine could not keep up with.
func newConversion(src Source) (conversion, error) {
	if err := src.validate(); err != nil {
		return conversion{}, err
	}
	// The declared rate is quoted exactly: float64 rounds rates above
	// 2^53 (math.MaxUint64 would read 18446744073709551616).
	return quotedConversion(src.Name, float64(src.Rate), strconv.FormatUint(src.Rate, 10), src.Bits)
}

// conversionFor derives the conversion of a counter of the given width at
// rate Hz (a measured rate may be fractional), refusing counters that the
// refresh goroutine could not keep up with.
func conversionFor(name string, rate float64, width int) (conversion, error) {
	return quotedConversion(name, rate, fmt.Sprintf("%.0f", rate), width)
}

// quotedConversion is conversionFor with the rate as its errors quote it.
func quotedConversion(name string, rate float64, hz string, width int) (conversion, error) {
	mult, shift, ok := multShift(rate, maskOf(width))
	if !ok {
		return conversion{}, fmt.Errorf("%w %q: no mult/shift for %s Hz", ErrInvalidSource, name, hz)
	}
	conv := conversion{mult: mult, shift: shift, mask: maskOf(width)}
	if e := conv.errorPPM(rate); math.Abs(e) > maxConversionPPM || math.IsNaN(e) {
		// A rate so high that a nanosecond is a handful of cycles: mult is
		// too small to carry the rate's digits.
		return conversion{}, fmt.Errorf("%w %q: %s Hz converts to nanoseconds %.3g ppm off (at most %v ppm): too fast a counter",
			ErrInvalidSource, name, hz, e, maxConversionPPM)
	}
	if conv.mask != ^uint64(0) && conv.latenessTolerated() < maxRefreshLateness {
		return conversion{}, fmt.Errorf("%w %q: a %d-bit counter at %s Hz wraps every %v; folded every %v, it tolerates a refresh %v late, "+
			"but the Go scheduler can run the refresh goroutine up to %v late: a counter must take at least %v to wrap",
			ErrInvalidSource, name, width, hz, conv.wrap(), conv.refreshPeriod(), conv.latenessTolerated(),
			maxRefreshLateness, maxRefreshLateness*4/3)
	}
	return conv, nil
}

// maxConversionPPM bounds the error of Mult*2^-Shift against the rate: a
// counter whose rate cannot be converted within it is refused. Every
// real counter rate (32 kHz to 10 GHz) converts within 0.01 ppm.
const maxConversionPPM = 1.0

// maxRefreshLateness is how late the refresh goroutine may run without a
// wrap being lost, for every counter that wraps: New and Register refuse
// a counter that would need it sooner (one that wraps in less than 4/3 of
// it, 667 ms). The Go runtime guarantees no deadline: behind goroutines
// that never yield, a due timer's goroutine starts only once sysmon has
// preempted them (forcePreemptNS is 10 ms, and sysmon polls at up to
// 10 ms intervals), and the OS adds its own delays on a busy machine.
// docs/guarantees.md has how late it ran beside busy goroutines and a
// loaded machine.
// TestNarrowCounterSurvivesABusyGoroutine runs the narrowest counters
// accepted beside a goroutine that never yields.
const maxRefreshLateness = 500 * time.Millisecond

func bitsOf(mask uint64) int { return bits.Len64(mask) }

func maskOf(bitCount int) uint64 {
	return ^uint64(0) >> (64 - uint(bitCount))
}

// negativeFrom is the first delta that counts as negative: a counter read
// below the epoch (cross-core skew, a migrated goroutine, a counter that
// stepped back) wraps to the top of the mask, and the top eighth of the
// mask is read as such a negative delta, never as centuries ahead
// (clocksource.c's max_raw_delta). Counters of fewer than 4 bits have no
// room for such a zone (mask>>3 is 0): on them a step back reads as a step
// forward.
func negativeFrom(mask uint64) uint64 { return mask - mask>>3 + 1 }

// overflowFrom is the first delta whose delta*mult + remainder no longer
// fits 64 bits; beyond it readers take the 128-bit path.
func (cv conversion) overflowFrom() uint64 {
	return (^uint64(0)-(uint64(1)<<cv.shift-1))/uint64(cv.mult) + 1
}

// window is the largest delta the fast path handles: below both the
// negative zone and the 64-bit overflow.
func (cv conversion) window() uint64 {
	return min(negativeFrom(cv.mask), cv.overflowFrom()) - 1
}

// errorPPM is the conversion's own error for a counter at rate Hz: how far
// mult*2^-shift, the ns per cycle it applies, is from 1e9/rate, in ppm.
func (cv conversion) errorPPM(rate float64) float64 {
	return (float64(cv.mult)/math.Ldexp(1, int(cv.shift))*rate/1e9 - 1) * 1e6
}

// wraps reports whether the counter wraps before delta*mult would
// overflow 64 bits: then the wrap, not the overflow, sets how often the
// counter must be folded, and a fold that comes too late loses time.
func (cv conversion) wraps() bool {
	return cv.mask < ^uint64(0)/uint64(cv.mult)
}

// wrap is how long the counter takes to wrap (saturated).
func (cv conversion) wrap() time.Duration {
	return time.Duration(min(cv.nanos(cv.mask)+cv.nanos(1), math.MaxInt64))
}

// refreshPeriod is how often the refresh goroutine folds the counter into
// the epoch. For a counter that does not wrap first, it is the kernel's
// clocks_calc_max_nsecs(mult, shift, 0, mask), half of the cycles before
// delta*mult overflows 64 bits (a 50% margin; a refresh later than that
// only sends readers to the 128-bit path). A counter that wraps is folded
// eight times per wrap, not twice as in the kernel: a fold late by up to
// 3/4 of the wrap loses nothing (see latenessTolerated), where the
// kernel's period allows only 3/8, and the Go scheduler can be tens of
// milliseconds late.
func (cv conversion) refreshPeriod() time.Duration {
	if cv.wraps() {
		return cv.wrap() / 8
	}
	maxCycles := min(^uint64(0)/uint64(cv.mult), cv.mask)
	return time.Duration(cv.nanos(maxCycles) >> 1)
}

// latenessTolerated is how late a fold of a counter that wraps may come
// before readers reach the negative zone (the top eighth of the mask) and
// time steps back: 7/8 of the wrap, less the refresh period.
func (cv conversion) latenessTolerated() time.Duration {
	return time.Duration(cv.nanos(negativeFrom(cv.mask))) - cv.refreshPeriod()
}

// nanos converts a cycle count to nanoseconds, in 128 bits, saturated at
// math.MaxInt64 so that it always fits a time.Duration.
func (cv conversion) nanos(cycles uint64) uint64 {
	hi, lo := bits.Mul64(cycles, uint64(cv.mult))
	ns, _ := addSaturating(0, hi, lo, cv.shift)
	return uint64(ns)
}

func shiftRight128(hi, lo uint64, shift uint32) uint64 {
	if shift == 0 {
		return lo
	}
	return hi<<(64-shift) | lo>>shift
}

// convertFrac re-expresses a remainder in 2^-from ns units as 2^-to ns
// units, rounding up so that a value never moves backwards.
func convertFrac(frac uint64, from, to uint32) uint64 {
	if to >= from {
		return frac << (to - from)
	}
	d := from - to
	return (frac + (uint64(1)<<d - 1)) >> d
}
