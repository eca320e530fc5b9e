package schedclock

import (
	"fmt"
	"math/bits"
	"time"
)

// The arithmetic of kernel/time/clocksource.c, for converting counter
// cycles to nanoseconds as (cycles*mult) >> shift.

// maxConversionSeconds is the kernel's maxsec for sched_clock: mult and
// shift are chosen so that an hour of cycles times mult fits 64 bits.
const maxConversionSeconds = 3600

// maxShift bounds shift: the carried remainder is below 1<<shift and
// must fit 64 bits comfortably. clocksMultShift stays far below it with
// maxsec 3600 and to = 1e9 (TestMultShiftBounds checks the rate range).
const maxShift = 32

// clocksMultShift is clocks_calc_mult_shift(): the largest shift (at most
// 32) whose rounded mult = (to<<shift + from/2) / from keeps
// maxsec*from*mult below 2^64. A zero mult means no usable conversion
// exists (from is absurdly high).
func clocksMultShift(from, to uint64, maxsec uint32) (mult, shift uint32) {
	// tmp = maxsec*from >> 32, in 128 bits so huge rates cannot wrap.
	hi, lo := bits.Mul64(uint64(maxsec), from)
	tmp := hi<<32 | lo>>32
	sftacc := 32
	for tmp != 0 {
		tmp >>= 1
		sftacc--
	}
	if sftacc <= 0 {
		return 0, 0
	}
	var sft uint32
	for sft = 32; sft > 0; sft-- {
		tmp = to << sft
		tmp += from / 2
		tmp /= from
		if tmp>>sftacc == 0 {
			break
		}
	}
	if tmp > 1<<32-1 {
		return 0, 0
	}
	return uint32(tmp), sft
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
	mult, shift := clocksMultShift(src.Rate, uint64(time.Second), maxConversionSeconds)
	if mult == 0 || shift > maxShift {
		return conversion{}, fmt.Errorf("%w %q: no mult/shift for %d Hz", ErrInvalidSource, src.Name, src.Rate)
	}
	conv := conversion{mult: mult, shift: shift, mask: maskOf(src.Bits)}
	if conv.wraps() && conv.latenessTolerated() < maxRefreshLateness {
		return conversion{}, fmt.Errorf("%w %q: a %d-bit counter at %d Hz wraps every %v; folded every %v, it tolerates a refresh %v late, "+
			"but the Go scheduler can run the refresh goroutine up to %v late: a counter must take at least %v to wrap",
			ErrInvalidSource, src.Name, src.Bits, src.Rate, conv.wrap(), conv.refreshPeriod(), conv.latenessTolerated(),
			maxRefreshLateness, maxRefreshLateness*4/3)
	}
	return conv, nil
}

// maxRefreshLateness is how late the refresh goroutine may run without a
// wrap being lost, for every counter that wraps: New and Register refuse
// a counter that would need it sooner (one that wraps in less than 4/3 of
// it, 667 ms). The Go runtime guarantees no deadline: behind goroutines
// that never yield, a due timer's goroutine starts only once sysmon has
// preempted them (forcePreemptNS is 10 ms, and sysmon polls at up to
// 10 ms intervals), and the OS adds its own delays on a busy machine.
// Measured with an 8-50 ms timer and 1-8 busy goroutines at GOMAXPROCS 1
// and 2 on a 2-vCPU EPYC KVM guest with Go 1.26.8: at most 38 ms late
// on an idle machine, and up to 310 ms at a load average of 13 (other
// processes competing for the two CPUs).
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

// wraps reports whether the counter wraps before delta*mult would
// overflow 64 bits: then the wrap, not the overflow, sets how often the
// counter must be folded, and a fold that comes too late loses time.
func (cv conversion) wraps() bool {
	return cv.mask < ^uint64(0)/uint64(cv.mult)
}

// wrap is how long the counter takes to wrap.
func (cv conversion) wrap() time.Duration {
	return time.Duration(cv.nanos(cv.mask) + cv.nanos(1))
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

// nanos converts a cycle count to nanoseconds, in 128 bits.
func (cv conversion) nanos(cycles uint64) uint64 {
	hi, lo := bits.Mul64(cycles, uint64(cv.mult))
	return shiftRight128(hi, lo, cv.shift)
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
