package pvclock

import (
	"encoding/binary"
	"math"
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// TimeData is the head of the vDSO's time data: the first page of the
// [vvar] mapping, which the kernel rewrites at every timekeeping update
// (update_vsyscall, once per tick on a CPU that ticks, and on the way
// out of a tickless idle). Every layout since Linux 5.6 begins with the
// first clock base's struct vdso_clock (vdso_data before 6.13): a u32
// sequence count, even when stable, two per update; the clock mode; and
// the clocksource's counter value at the update (cycle_last).
type TimeData struct {
	seq       atomic.Uint32
	mode      int32
	cycleLast atomic.Uint64
}

// TimeDataSize is how much of the page ProbeTimeData copies to find the
// coarse clock's base in it: the struct vdso_clock of the high-resolution
// bases, whose basetime array (12 entries of 16 bytes) ends before 256
// bytes in every layout.
const TimeDataSize = 512

// Stamp identifies the kernel's last timekeeping update: its sequence
// count and its counter value, folded. It changes at every update and
// does not come back (the sequence count alone would after 2^31 updates,
// some 99 days of ticks at 250 Hz; the counter value on a 64-bit
// clocksource never does). A nil TimeData's stamp is 0, always.
func (t *TimeData) Stamp() uint64 {
	if t == nil {
		return 0
	}
	return t.cycleLast.Load() ^ uint64(t.seq.Load())<<32
}

// FindCoarse says where b, a copy of the head of a vDSO time data page
// taken while its sequence count stood still, holds the kernel's
// CLOCK_MONOTONIC_COARSE time (sec, nsec) read meanwhile: the offset of
// the pair, 8-byte aligned, among the bases, behind a stable (even)
// count; ok is false where it holds none. A time namespace's page (its
// count stands at 1, its bases are offsets) and any other page fail.
func FindCoarse(b []byte, sec, nsec uint64) (at int, ok bool) {
	if len(b) < 16 || binary.NativeEndian.Uint32(b)&1 != 0 {
		return 0, false
	}
	for off := 16; off+16 <= len(b); off += 8 {
		if binary.NativeEndian.Uint64(b[off:]) == sec && binary.NativeEndian.Uint64(b[off+8:]) == nsec {
			return off, true
		}
	}
	return 0, false
}

// Layout is where a kernel's vDSO time data keeps clock base 0's
// conversion (struct vdso_clock): the counter's mask, mult and shift
// just before the basetime array (8 bytes later from Linux 6.10 on,
// which put max_cycles between cycle_last and mask), whose entry 6 is
// CLOCK_MONOTONIC_COARSE. Its zero value is no layout.
type Layout struct {
	basetime int // offset of basetime[0]
}

// The clock ids whose basetime entries a conversion reads.
const (
	baseMonotonic       = 1
	baseMonotonicCoarse = 6
	baseBoottime        = 7
	bases               = 12 // VDSO_BASES
	timestampSize       = 16 // struct vdso_timestamp: sec, nsec
	// minBasetime is basetime's offset without max_cycles: seq, clock
	// mode, cycle_last, mask, mult, shift.
	minBasetime = 32
)

// FindLayout is FindCoarse's offset made a Layout, where b is a
// conversion a vDSO reads (layoutAt).
func FindLayout(b []byte, sec, nsec uint64) (Layout, bool) {
	at, ok := FindCoarse(b, sec, nsec)
	if !ok {
		return Layout{}, false
	}
	l := Layout{basetime: at - baseMonotonicCoarse*timestampSize}
	if l.maskAt() < 0 {
		return Layout{}, false // nothing to read there; layoutAt refuses it too
	}
	return layoutAt(at, len(b), binary.NativeEndian.Uint64(b[l.maskAt():]),
		binary.NativeEndian.Uint32(b[l.multAt():]), binary.NativeEndian.Uint32(b[l.shiftAt():]))
}

// Layout is the layout of the conversion around the coarse base that
// ProbeTimeData found at offset coarse (layoutAt), read from the page
// itself: only KernelTime needs it, so only programs that call it link
// it.
func (t *TimeData) Layout(coarse int) (Layout, bool) {
	l := Layout{basetime: coarse - baseMonotonicCoarse*timestampSize}
	if l.maskAt() < 0 || coarse+timestampSize > TimeDataSize {
		return Layout{}, false // nothing to read there; layoutAt refuses it too
	}
	return layoutAt(coarse, TimeDataSize, t.u64(l.maskAt()).Load(), t.u32(l.multAt()).Load(), t.u32(l.shiftAt()).Load())
}

// layoutAt is the Layout around a coarse base at offset coarse in data
// size bytes long, holding mask, mult and shift where it says, if that
// is a conversion a vDSO reads: basetime whole within the data and past
// the head, the mask a run of low bits, mult not 0 and shift at most 32
// (clocks_calc_mult_shift's range).
func layoutAt(coarse, size int, mask uint64, mult, shift uint32) (Layout, bool) {
	l := Layout{basetime: coarse - baseMonotonicCoarse*timestampSize}
	if l.basetime < minBasetime || l.basetime+bases*timestampSize > size {
		return Layout{}, false
	}
	if mask < 1<<31 || mask&(mask+1) != 0 || mult == 0 || shift > 32 {
		return Layout{}, false
	}
	return l, true
}

// Valid says the layout was found.
func (l Layout) Valid() bool { return l.basetime != 0 }

// Basetime is basetime[0]'s offset.
func (l Layout) Basetime() int { return l.basetime }

func (l Layout) maskAt() int  { return l.basetime - 16 }
func (l Layout) multAt() int  { return l.basetime - 8 }
func (l Layout) shiftAt() int { return l.basetime - 4 }
func (l Layout) baseAt(id int) int {
	return l.basetime + id*timestampSize
}

// Conv is one timekeeping update as the vDSO converts with it (lib/vdso's
// do_hres): the time of clock Base[i] at counter value cyc is
//
//	Base[i].Sec*1e9 + ((cyc-CycleLast)*Mult + Base[i].Nsec) >> Shift
//
// with Nsec in 2^-Shift ns, for CLOCK_MONOTONIC (i 0) and CLOCK_BOOTTIME
// (i 1).
type Conv struct {
	Seq         uint32
	Mode        int32 // the vDSO's clock mode: 1 the TSC, 2 the pvclock page
	CycleLast   uint64
	Mult, Shift uint32
	Base        [2]Timestamp
}

// Timestamp is a struct vdso_timestamp.
type Timestamp struct {
	Sec, Nsec uint64
}

// The vDSO clock modes (VDSO_CLOCKMODE_*) on x86.
const (
	ModeTSC     = 1
	ModePvclock = 2
)

// Load reads the conversion under the data's sequence count, as the vDSO
// does: ok false while the kernel is writing it (an odd count, or one
// that moved during the reads), for the caller to try again or do
// without; the vDSO spins there.
func (t *TimeData) Load(l Layout) (c Conv, ok bool) {
	seq := t.seq.Load()
	if seq&1 != 0 {
		return c, false
	}
	c.Seq = seq
	c.Mode = int32(t.u32(4).Load()) // loaded atomically: the kernel writes it
	c.CycleLast = t.cycleLast.Load()
	c.Mult, c.Shift = t.u32(l.multAt()).Load(), t.u32(l.shiftAt()).Load()
	c.Base[0] = Timestamp{t.u64(l.baseAt(baseMonotonic)).Load(), t.u64(l.baseAt(baseMonotonic) + 8).Load()}
	c.Base[1] = Timestamp{t.u64(l.baseAt(baseBoottime)).Load(), t.u64(l.baseAt(baseBoottime) + 8).Load()}
	return c, t.seq.Load() == seq
}

func (t *TimeData) u32(off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Add(unsafe.Pointer(t), off))
}

func (t *TimeData) u64(off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Add(unsafe.Pointer(t), off))
}

// At is clock Base[i]'s time at counter value cyc, as the vDSO computes
// it on x86: a cyc below CycleLast is no motion (arch_vdso_calc_ns's
// negative-motion filter); a delta whose product overflows 64 bits is
// multiplied in 128 (mul_u64_u32_add_u64_shr, past max_cycles). Where the
// kernel's sum would pass 2^63 ns (centuries past cycle_last), the
// result saturates at math.MaxInt64.
func (c *Conv) At(i int, cyc uint64) int64 {
	return convertAt(c.Base[i].Sec, c.Base[i].Nsec, c.CycleLast, c.Mult, c.Shift, cyc)
}

func convertAt(sec, nsec, cycleLast uint64, mult, shift uint32, cyc uint64) int64 {
	delta := cyc - cycleLast
	if cyc < cycleLast {
		delta = 0
	}
	hi, lo := bits.Mul64(delta, uint64(mult))
	lo, carry := bits.Add64(lo, nsec, 0)
	hi += carry
	// hi<<64 is 0: at shift 0, hi must be 0, which the check asks.
	sum, over := bits.Add64(sec*1e9, lo>>shift|hi<<(64-shift), 0)
	if hi>>shift|over != 0 || sum > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(sum)
}

// Convert is Load and At in one, for a caller that needs one clock at
// one counter value and would rather not copy the conversion: clock
// Base[i]'s time at cyc, and the sequence count and clock mode of the
// conversion it used; ok false while the kernel is writing it.
func (t *TimeData) Convert(l Layout, i int, cyc uint64) (ns int64, seq uint32, mode int32, ok bool) {
	seq = t.seq.Load()
	if seq&1 != 0 {
		return 0, seq, 0, false
	}
	mode = int32(t.u32(4).Load())
	cycleLast := t.cycleLast.Load()
	mult, shift := t.u32(l.multAt()).Load(), t.u32(l.shiftAt()).Load()
	at := l.baseAt(baseMonotonic)
	if i != 0 {
		at = l.baseAt(baseBoottime)
	}
	sec, nsec := t.u64(at).Load(), t.u64(at+8).Load()
	if t.seq.Load() != seq {
		return 0, seq, mode, false
	}
	return convertAt(sec, nsec, cycleLast, mult, shift, cyc), seq, mode, true
}

// BootOffset is CLOCK_BOOTTIME less CLOCK_MONOTONIC under the conversion
// in the data now (the time spent suspended), and CLOCK_MONOTONIC at
// its cycle_last (from which on it holds: a resume publishes a new
// conversion), and the conversion's sequence count; ok false while the
// kernel is writing it. The kernel keeps
// both bases a whole number of ns apart, so the difference is exact at
// every counter value.
func (t *TimeData) BootOffset(l Layout) (offset, from int64, seq uint32, ok bool) {
	seq = t.seq.Load()
	if seq&1 != 0 {
		return 0, 0, 0, false
	}
	shift := t.u32(l.shiftAt()).Load()
	monoSec, monoNsec := t.u64(l.baseAt(baseMonotonic)).Load(), t.u64(l.baseAt(baseMonotonic)+8).Load()
	bootSec, bootNsec := t.u64(l.baseAt(baseBoottime)).Load(), t.u64(l.baseAt(baseBoottime)+8).Load()
	if t.seq.Load() != seq || shift > 32 {
		return 0, 0, 0, false
	}
	offset = int64(bootSec-monoSec)*1e9 + (int64(bootNsec)-int64(monoNsec))>>shift
	return offset, int64(monoSec*1e9 + monoNsec>>shift), seq, true
}

// RawConv is the kernel's conversion of its clocksource's counter to
// CLOCK_MONOTONIC_RAW: the vDSO's second clock base (CS_RAW), whose
// time at counter value cyc is
//
//	Base.Sec*1e9 + ((cyc-CycleLast)*Mult + Base.Nsec) >> Shift
//
// Its mult and shift are the clocksource's own (tkr_raw: no NTP
// adjustment ever touches them), so they stay what they are for as
// long as the kernel runs on the same clocksource.
type RawConv struct {
	Seq         uint32
	Mode        int32
	CycleLast   uint64
	Mult, Shift uint32
	Base        Timestamp
}

// At is CLOCK_MONOTONIC_RAW at counter value cyc, as Conv.At computes
// its clocks.
func (r *RawConv) At(cyc uint64) int64 {
	return convertAt(r.Base.Sec, r.Base.Nsec, r.CycleLast, r.Mult, r.Shift, cyc)
}

// baseMonotonicRaw is CLOCK_MONOTONIC_RAW's basetime entry in the raw
// clock base.
const baseMonotonicRaw = 4

// rawStrides are where the raw clock base may start, after the first
// one's basetime: struct vdso_clock ends with its basetime array (Linux
// 6.13 on), struct vdso_data with 16 bytes more (tz_minuteswest,
// tz_dsttime, hrtimer_res, __unused: 5.6 to 6.12; x86 and arm64 have no
// arch_data in it).
var rawStrides = [...]int{bases * timestampSize, bases*timestampSize + 16}

// Raw reads the raw clock base's conversion (CS_RAW), under the data's
// sequence count: ok false while the kernel writes it, and where no
// candidate place holds it. The kernel writes both bases in one update
// (update_vsyscall): the same sequence count, clock mode, cycle_last
// and mask in each; a place whose head does not repeat the first base's
// is not the raw base, and one whose mult is 0 or shift past 32 is no
// conversion.
func (t *TimeData) Raw(l Layout) (r RawConv, ok bool) {
	if !l.Valid() {
		return r, false
	}
	seq := t.seq.Load()
	if seq&1 != 0 {
		return r, false
	}
	mode := int32(t.u32(4).Load())
	cycleLast := t.cycleLast.Load()
	mask := t.u64(l.maskAt()).Load()
	for _, stride := range rawStrides {
		at := l.basetime + stride
		if at+l.baseAt(baseMonotonicRaw)+timestampSize > TimeDataSize {
			continue
		}
		if t.u32(at).Load() != seq || int32(t.u32(at+4).Load()) != mode ||
			t.u64(at+8).Load() != cycleLast || t.u64(at+l.maskAt()).Load() != mask {
			continue
		}
		r = RawConv{Seq: seq, Mode: mode, CycleLast: cycleLast,
			Mult: t.u32(at + l.multAt()).Load(), Shift: t.u32(at + l.shiftAt()).Load(),
			Base: Timestamp{t.u64(at + l.baseAt(baseMonotonicRaw)).Load(), t.u64(at + l.baseAt(baseMonotonicRaw) + 8).Load()}}
		if r.Mult == 0 || r.Shift > 32 || t.seq.Load() != seq {
			return RawConv{}, false
		}
		return r, true
	}
	return RawConv{}, false
}
