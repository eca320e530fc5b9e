package perfclock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// The offsets this package reads in struct perf_event_mmap_page
// (include/uapi/linux/perf_event.h: they are user ABI, fixed since
// Linux 3.12 for time_zero, 5.12 for time_cycles and time_mask).
const (
	offLock       = 8  // u32 lock: the seqcount the kernel bumps around an update
	offCaps       = 40 // u64 capabilities
	offTimeShift  = 50 // u16 time_shift
	offTimeMult   = 52 // u32 time_mult
	offTimeZero   = 64 // u64 time_zero
	offSize       = 72 // u32 size: how much of the struct the kernel fills
	offTimeCycles = 80 // u64 time_cycles
	offTimeMask   = 88 // u64 time_mask
	// HeaderLen is how much of the page Parse reads.
	HeaderLen = 96
)

// The capability bits (the bitfield after cap_bit0 and
// cap_bit0_is_deprecated, which must be set for the rest to mean
// anything).
const (
	capBit0IsDeprecated = 1 << 1
	capUserTimeZero     = 1 << 4
	capUserTimeShort    = 1 << 5
)

// ErrNoTimeZero says the kernel does not export perf's clock in the
// page: cap_user_time_zero is clear (a kernel whose sched_clock is not
// the counter, such as a kvm-clock guest's).
var ErrNoTimeZero = errors.New("perfclock: the kernel sets no cap_user_time_zero")

// Conversion is the page's counter-to-perf-time conversion.
type Conversion struct {
	Zero   uint64 // time_zero: perf time at counter 0
	Mult   uint32
	Shift  uint16
	Cycles uint64 // time_cycles, with Mask: a counter narrower than 64 bits (Short)
	Mask   uint64
	Short  bool // cap_user_time_short
}

// Parse reads the conversion from the first HeaderLen bytes of a
// perf_event_mmap_page (as the machine wrote them: little or big endian
// per binary.NativeEndian). It refuses a page too short, one whose
// capabilities use the deprecated layout, one without
// cap_user_time_zero, and a shift that would lose the counter (≥ 64).
func Parse(page []byte) (Conversion, error) {
	if len(page) < HeaderLen {
		return Conversion{}, fmt.Errorf("perfclock: page of %d bytes, want at least %d", len(page), HeaderLen)
	}
	le := binary.NativeEndian
	caps := le.Uint64(page[offCaps:])
	if caps&capBit0IsDeprecated == 0 {
		return Conversion{}, fmt.Errorf("perfclock: capabilities %#x in the layout before Linux 3.12", caps)
	}
	if caps&capUserTimeZero == 0 {
		return Conversion{}, ErrNoTimeZero
	}
	c := Conversion{
		Zero:  le.Uint64(page[offTimeZero:]),
		Mult:  le.Uint32(page[offTimeMult:]),
		Shift: le.Uint16(page[offTimeShift:]),
	}
	if c.Shift >= 64 || c.Mult == 0 {
		return Conversion{}, fmt.Errorf("perfclock: time_mult %d, time_shift %d", c.Mult, c.Shift)
	}
	if caps&capUserTimeShort != 0 {
		if size := le.Uint32(page[offSize:]); size < HeaderLen {
			return Conversion{}, fmt.Errorf("perfclock: cap_user_time_short in a page of size %d", size)
		}
		c.Short, c.Cycles, c.Mask = true, le.Uint64(page[offTimeCycles:]), le.Uint64(page[offTimeMask:])
	}
	return c, nil
}

// Time converts the counter value cyc to perf time, in ns, as
// tools/perf/util/tsc.c's tsc_to_perf_time does (wrapping as the
// kernel's u64 arithmetic does).
func (c Conversion) Time(cyc uint64) uint64 {
	if c.Short {
		cyc = c.Cycles + (cyc-c.Cycles)&c.Mask
	}
	quot := cyc >> c.Shift
	rem := cyc & (1<<c.Shift - 1)
	// rem*mult < 2^(shift+32): a 128-bit product keeps it exact for
	// shifts above 32, where the kernel's u64 product would wrap (no
	// kernel uses one).
	var frac uint64
	if c.Shift > 0 {
		hi, lo := bits.Mul64(rem, uint64(c.Mult))
		frac = lo>>c.Shift | hi<<(64-c.Shift)
	}
	return c.Zero + quot*uint64(c.Mult) + frac
}
