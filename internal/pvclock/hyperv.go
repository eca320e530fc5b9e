package pvclock

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync/atomic"
)

// HypervSize is the part of struct ms_hyperv_tsc_page the reader uses.
const HypervSize = 24

// HypervPage is struct ms_hyperv_tsc_page (include/clocksource/hyperv_timer.h,
// the Hyper-V TLFS "reference TSC page"):
//
//	volatile u32 tsc_sequence;  @0   0: the page is invalid
//	u32 reserved1;              @4
//	volatile u64 tsc_scale;     @8
//	volatile s64 tsc_offset;    @16
//
// reference time in 100 ns units = ((tsc * tsc_scale) >> 64) + tsc_offset.
type HypervPage struct {
	sequence atomic.Uint32
	_        uint32
	scale    atomic.Uint64
	offset   atomic.Int64
}

// Hyperv is a decoded copy of the page.
type Hyperv struct {
	Sequence uint32
	Scale    uint64
	Offset   int64
}

// DecodeHyperv decodes struct ms_hyperv_tsc_page from its first 24 bytes.
func DecodeHyperv(b []byte) (Hyperv, error) {
	if len(b) < HypervSize {
		return Hyperv{}, fmt.Errorf("%w: ms_hyperv_tsc_page needs %d bytes, got %d", ErrImplausible, HypervSize, len(b))
	}
	return Hyperv{
		Sequence: binary.LittleEndian.Uint32(b[0:]),
		Scale:    binary.LittleEndian.Uint64(b[8:]),
		Offset:   int64(binary.LittleEndian.Uint64(b[16:])),
	}, nil
}

// Plausible says why h cannot be a valid page, or nil: sequence 0 is the
// hypervisor's "invalid, use the MSR" (hv_read_tsc_page_tsc returns
// false), and a zero scale would stop the clock.
func (h Hyperv) Plausible() error {
	switch {
	case h.Sequence == 0:
		return fmt.Errorf("%w: tsc_sequence is 0 (the hypervisor marked the page invalid)", ErrImplausible)
	case h.Scale == 0:
		return fmt.Errorf("%w: tsc_scale is 0", ErrImplausible)
	}
	return nil
}

// Units100ns is the page's reference time at TSC value tsc, in 100 ns
// units: mul_u64_u64_shr(tsc, scale, 64) + offset, as
// hv_read_tsc_page_tsc computes it.
func (h Hyperv) Units100ns(tsc uint64) uint64 {
	hi, _ := bits.Mul64(tsc, h.Scale)
	return hi + uint64(h.Offset)
}

// Nanoseconds converts the page's time to ns as the kernel's Hyper-V
// sched_clock does (read_hv_sched_clock_tsc in
// drivers/clocksource/hyperv_timer.c: the reference count times
// NSEC_PER_SEC / HV_CLOCK_HZ, that is 100); the vDSO reaches the same
// nanoseconds through its clocksource's mult/shift for 10 MHz.
func (h Hyperv) Nanoseconds(tsc uint64) uint64 { return h.Units100ns(tsc) * 100 }

// Load returns a copy of the page's fields, without the sequence check.
func (pg *HypervPage) Load() Hyperv {
	return Hyperv{Sequence: pg.sequence.Load(), Scale: pg.scale.Load(), Offset: pg.offset.Load()}
}

// ReadWith is hv_read_tsc_page_tsc in Go, tsc being the ordered TSC read
// (hv_get_raw_timer is rdtsc_ordered): the sequence (0: invalid, ok
// false, the caller falls back as the vDSO does), the scale and offset,
// the TSC, the sequence again; a changed sequence reads again, at most
// maxTries times (see maxTries for why the bound is sound; the claim
// there is KVM's, checked in its source; for Hyper-V, whose source we
// cannot read, the bound is all there is).
// ns is the reference time in ns (Nanoseconds); a page whose scale is 0
// (a clock that never moves, not time) reads !ok as an invalid one does.
// sequence is the sequence the reading was made under.
func (pg *HypervPage) ReadWith(tsc func() uint64) (ns uint64, sequence uint32, ok bool) {
	for range maxTries {
		sequence = pg.sequence.Load()
		if sequence == 0 {
			return 0, 0, false
		}
		h := Hyperv{Sequence: sequence, Scale: pg.scale.Load(), Offset: pg.offset.Load()}
		cur := tsc()
		if pg.sequence.Load() == sequence {
			if h.Scale == 0 {
				return 0, sequence, false
			}
			return h.Nanoseconds(cur), sequence, true
		}
	}
	return 0, 0, false
}

// Snapshot returns the page's fields as one consistent copy (the
// sequence before and after them equal and not 0), ok false otherwise.
func (pg *HypervPage) Snapshot() (h Hyperv, ok bool) {
	h = Hyperv{Sequence: pg.sequence.Load(), Scale: pg.scale.Load(), Offset: pg.offset.Load()}
	return h, h.Sequence != 0 && pg.sequence.Load() == h.Sequence
}

// Publish writes h into the page as the hypervisor does: the sequence
// set to 0 (invalid) while scale and offset change, then to h.Sequence.
// Tests drive synthetic pages with it.
func (pg *HypervPage) Publish(h Hyperv) {
	pg.sequence.Store(0)
	pg.scale.Store(h.Scale)
	pg.offset.Store(h.Offset)
	pg.sequence.Store(h.Sequence)
}
