package pvclock

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"sync/atomic"

	"github.com/schedclock/schedclock/internal/format"
)

// Sentinel errors; each error this package returns wraps one of them.
var (
	// ErrNoPage: this process has no clock page to read (no such
	// mapping, the kernel has not mapped it, another OS or arch).
	ErrNoPage = errors.New("pvclock: no clock page")
	// ErrLayout: the mappings do not match a layout whose page offsets
	// were verified against the kernel's source.
	ErrLayout = errors.New("pvclock: unknown vvar layout")
	// ErrImplausible: the bytes read do not look like the page.
	ErrImplausible = errors.New("pvclock: implausible page")
)

// TSCStableBit is PVCLOCK_TSC_STABLE_BIT (arch/x86/include/asm/pvclock-abi.h):
// the hypervisor's promise that vCPU 0's page gives a monotonic clock on
// every vCPU. Without it the vDSO falls back to the system call, and so
// do the readers here (ok false).
const TSCStableBit = 1 << 0

// PvclockSize is the size of struct pvclock_vcpu_time_info.
const PvclockSize = 32

// Page is struct pvclock_vcpu_time_info (arch/x86/include/asm/pvclock-abi.h),
// vCPU 0's copy, the one the vDSO reads:
//
//	u32 version;            @0   odd while the hypervisor writes
//	u32 pad0;               @4
//	u64 tsc_timestamp;      @8
//	u64 system_time;        @16  ns at tsc_timestamp
//	u32 tsc_to_system_mul;  @24
//	s8  tsc_shift;          @28
//	u8  flags;              @29
//	u8  pad[2];             @30
//
// Its fields are atomics so that a test's writer goroutine and the Go
// reader stay clean under -race; on amd64 an atomic load is a plain MOV,
// the same load the vDSO and the assembly reader make. The hypervisor
// writes the real page without asking Go.
type Page struct {
	version      atomic.Uint32
	_            uint32
	tscTimestamp atomic.Uint64
	systemTime   atomic.Uint64
	mul          atomic.Uint32
	shiftFlags   atomic.Uint32 // tsc_shift in byte 0, flags in byte 1 (little-endian)
}

// Pvclock is a decoded copy of the page's fields.
type Pvclock struct {
	Version      uint32
	TSCTimestamp uint64
	SystemTime   uint64
	Mul          uint32
	Shift        int8
	Flags        uint8
}

// Stable reports PVCLOCK_TSC_STABLE_BIT.
func (p Pvclock) Stable() bool { return p.Flags&TSCStableBit != 0 }

// DecodePvclock decodes struct pvclock_vcpu_time_info from its first 32
// bytes (little-endian: the page is x86's).
func DecodePvclock(b []byte) (Pvclock, error) {
	if len(b) < PvclockSize {
		return Pvclock{}, format.Errorf("%w: pvclock_vcpu_time_info is %d bytes, got %d", ErrImplausible, PvclockSize, len(b))
	}
	return Pvclock{
		Version:      binary.LittleEndian.Uint32(b[0:]),
		TSCTimestamp: binary.LittleEndian.Uint64(b[8:]),
		SystemTime:   binary.LittleEndian.Uint64(b[16:]),
		Mul:          binary.LittleEndian.Uint32(b[24:]),
		Shift:        int8(b[28]),
		Flags:        b[29],
	}, nil
}

// Plausible says why p cannot be a live pvclock page, or nil: the
// hypervisor always writes a non-zero multiplier (kvm_get_time_scale,
// pvclock_set_pvti_cpu0_va's page is zero until then), a shift within
// the range kvm_get_time_scale produces (a 64-bit delta shifted by more
// than 31 either way means nothing), and only the flag bits the ABI
// defines (TSC_STABLE, GUEST_STOPPED). The version may be even or odd
// (odd: an update in flight).
func (p Pvclock) Plausible() error {
	switch {
	case p.Mul == 0:
		return format.Errorf("%w: tsc_to_system_mul is 0", ErrImplausible)
	case p.Shift < -31 || p.Shift > 31:
		return format.Errorf("%w: tsc_shift %d outside -31..31", ErrImplausible, p.Shift)
	case p.Flags&^(TSCStableBit|guestStoppedBit) != 0:
		return format.Errorf("%w: flags %#x has bits the ABI does not define", ErrImplausible, p.Flags)
	}
	return nil
}

// guestStoppedBit is PVCLOCK_GUEST_STOPPED: the host paused the guest.
const guestStoppedBit = 1 << 1

// ScaleDelta is pvclock_scale_delta (arch/x86/include/asm/pvclock.h):
// delta shifted left by shift (right when negative), then multiplied by
// mul as a 32.32 fraction, with the full 128-bit product (the kernel's
// mul_u64_u32_shr(delta, mul, 32)). The shift count is taken mod 64, as
// x86's SHL/SHR by CL take it in the kernel's compiled code and in the
// assembly reader (C leaves shifts of 64 or more undefined; a live page
// never holds one, see Plausible).
func ScaleDelta(delta uint64, mul uint32, shift int8) uint64 {
	if shift < 0 {
		delta >>= uint(-int(shift)) & 63
	} else {
		delta <<= uint(shift) & 63
	}
	hi, lo := bits.Mul64(delta, uint64(mul))
	return hi<<32 | lo>>32
}

// Cycles is __pvclock_read_cycles: the page's time at TSC value tsc,
// as the kernel computes it. A tsc below tsc_timestamp wraps: the
// kernel's vDSO throws the wrapped value away later (Time says how the
// readers here do it).
func (p Pvclock) Cycles(tsc uint64) uint64 {
	return p.SystemTime + ScaleDelta(tsc-p.TSCTimestamp, p.Mul, p.Shift)
}

// Scalable reports whether p's scale can be the hypervisor's: a non-zero
// multiplier (a zero one stops the clock) and a shift within -31..31
// (kvm_get_time_scale's range, and more: a 64-bit delta shifted further
// means nothing). The readers refuse a page without it (ok false), as
// they refuse a page under update: its parameters are not time.
func (p Pvclock) Scalable() bool {
	return p.Mul != 0 && p.Shift >= -maxShift && p.Shift <= maxShift
}

// maxShift bounds tsc_shift either way (Scalable).
const maxShift = 31

// Time is the page's time at TSC value tsc as the readers return it:
// Cycles with the TSC's motion since tsc_timestamp counted only when it
// is forward. A tsc below the stamp (a vCPU a few counts behind the one
// the page was written for, or a page stamped ahead of the TSC) is no
// motion: the page's system_time, never a wrapped delta of some 2^64
// counts. The kernel's x86 vdso_calc_ns makes the same call on the
// 63-bit value vread_pvclock returns ("the effective sign bit is now
// bit 62"); here the rule is applied where the wrap happens, to the TSC
// delta: one with bit 62 or 63 set (2^62 counts are decades at any TSC
// rate) is negative motion. The result has its top bit cleared, as the
// vDSO returns it (ret & S64_MAX): the Source's values are 63 bits wide.
func (p Pvclock) Time(tsc uint64) uint64 {
	return (p.SystemTime + ScaleDelta(forward(tsc-p.TSCTimestamp), p.Mul, p.Shift)) & (1<<63 - 1)
}

// TSCAt is Time inverted: the least TSC value at which the page's time
// reaches ns, for a Scalable page. Where ns is below system_time (a
// reading of an earlier version of the page), the page's time is
// extended back before tsc_timestamp at its scale: system_time less the
// scaled distance back. The page's time covers each ns over one or more
// counts (a TSC of 1 GHz or more), and TSCAt is the first of them. It
// saturates at the ends of the TSC's range.
func (p Pvclock) TSCAt(ns uint64) uint64 {
	if ns >= p.SystemTime {
		d, ok := leastDelta(ns-p.SystemTime, p.Mul, p.Shift)
		if !ok || d > ^uint64(0)-p.TSCTimestamp {
			return ^uint64(0)
		}
		return p.TSCTimestamp + d
	}
	// The greatest distance back whose scaled ns stay within
	// system_time - ns: one less than the least that passes it.
	d, ok := leastDelta(p.SystemTime-ns+1, p.Mul, p.Shift)
	if !ok || d-1 > p.TSCTimestamp {
		return 0
	}
	return p.TSCTimestamp - (d - 1)
}

// leastDelta is the least TSC delta d with ScaleDelta(d, mul, shift) >=
// ns; ok false past 64 bits. ScaleDelta is floor((d shifted)·mul/2^32),
// so the shifted delta must be at least ceil(ns·2^32/mul).
func leastDelta(ns uint64, mul uint32, shift int8) (d uint64, ok bool) {
	if ns == 0 {
		return 0, true
	}
	hi, lo := ns>>32, ns<<32
	if hi >= uint64(mul) {
		return 0, false
	}
	e, rem := bits.Div64(hi, lo, uint64(mul))
	if rem != 0 {
		if e++; e == 0 {
			return 0, false
		}
	}
	if shift >= 0 {
		k := uint(shift)
		d = e >> k
		if d<<k != e {
			d++
		}
		return d, d <= ^uint64(0)>>k
	}
	k := uint(-int(shift))
	if e > ^uint64(0)>>k {
		return 0, false
	}
	return e << k, true
}

// forward is a TSC delta counted only when it is forward motion (see
// Time): 0 when bit 62 or 63 is set.
func forward(delta uint64) uint64 {
	if delta>>62 != 0 {
		return 0
	}
	return delta
}

// Load returns a copy of the page's fields, each loaded once, in the
// order the reader loads them; no version check (see ReadWith for one).
func (pg *Page) Load() Pvclock {
	sf := pg.shiftFlags.Load()
	return Pvclock{
		Version:      pg.version.Load(),
		TSCTimestamp: pg.tscTimestamp.Load(),
		SystemTime:   pg.systemTime.Load(),
		Mul:          pg.mul.Load(),
		Shift:        int8(sf),
		Flags:        uint8(sf >> 8),
	}
}

// Snapshot returns the page's fields as one consistent copy: the
// version (even) loaded before and after the fields, as a reader loads
// them; ok false while an update is in flight or the version changed
// between the loads.
func (pg *Page) Snapshot() (p Pvclock, ok bool) {
	version := pg.version.Load()
	sf := pg.shiftFlags.Load()
	p = Pvclock{
		Version:      version,
		TSCTimestamp: pg.tscTimestamp.Load(),
		SystemTime:   pg.systemTime.Load(),
		Mul:          pg.mul.Load(),
		Shift:        int8(sf),
		Flags:        uint8(sf >> 8),
	}
	return p, version&1 == 0 && pg.version.Load() == version
}

// maxTries bounds every reader's version loop. The writer is the
// hypervisor: KVM writes the page in kvm_setup_guest_pvclock
// (arch/x86/kvm/x86.c) with the version made odd, smp_wmb, the fields,
// smp_wmb, the version made even, all under read_lock_irqsave of the
// page's cache lock, so on the host that update is a few hundred
// instructions with interrupts off: the host thread cannot be preempted
// half-way, and the vCPU whose page it is sits outside the guest
// meanwhile ("This VCPU is paused, but it's legal for a guest to read
// another VCPU's kvmclock"). A guest reader on another vCPU therefore
// sees an odd or changed version for at most that long, and a retry
// succeeds within a few tries. The loop is still bounded, because the
// claim is the host's and not ours (a nested hypervisor, an NMI or SMI on
// the host, a synthetic page driven by a test goroutine that the Go
// scheduler stops half-way): after maxTries the reader gives up and
// reports !ok, and its caller falls back, as the vDSO does for an
// unstable page. 1024 tries of one LFENCE;RDTSC each (about 25 ns) is
// some 25 µs, far past any update's length.
const maxTries = 1024

// ReadWith is vread_pvclock (arch/x86/include/asm/vdso/gettimeofday.h)
// in Go, with tsc the ordered TSC read (the vDSO's rdtsc_ordered): the
// version with its low bit cleared (pvclock_read_begin: an odd version
// can then never match the re-check), the stable bit, the fields, the
// TSC, the version again (pvclock_read_retry). The reading is Time's: a
// TSC below the page's stamp is no motion. ok is false when the stable
// bit is clear (the vDSO returns U64_MAX then and takes the system
// call), when the page's scale cannot be the hypervisor's (Scalable:
// such a page is not time, whatever its version says) or when maxTries
// versions changed under the reader. version is the (even) version the
// reading was made under. x86 keeps loads in order, so Go's atomic loads
// (plain MOVs) give the vDSO's smp_rmb for free; the TSC read must itself
// be ordered after the field loads (LFENCE; RDTSC), which is tsc's job.
//
// It is the reference the assembly reader is tested against, and the
// reader of builds without assembly (given a tsc function).
func (pg *Page) ReadWith(tsc func() uint64) (ns uint64, version uint32, ok bool) {
	for range maxTries {
		version = pg.version.Load() &^ 1
		sf := pg.shiftFlags.Load()
		if uint8(sf>>8)&TSCStableBit == 0 {
			return 0, version, false
		}
		p := Pvclock{TSCTimestamp: pg.tscTimestamp.Load(), SystemTime: pg.systemTime.Load(), Mul: pg.mul.Load(), Shift: int8(sf)}
		if !p.Scalable() {
			if pg.version.Load() == version {
				return 0, version, false // the page as published
			}
			continue // torn: under update
		}
		ns = p.Time(tsc())
		if pg.version.Load() == version {
			return ns, version, true
		}
	}
	return 0, version, false
}

// Publish writes p into the page the way kvm_setup_guest_pvclock does:
// version made odd, fields, version made even (p.Version is ignored: the
// page's version advances by 2). Tests drive synthetic pages with it;
// BeginUpdate and EndUpdate split it so that a test can hold the page
// odd while readers run.
func (pg *Page) Publish(p Pvclock) {
	pg.BeginUpdate()
	pg.Store(p)
	pg.EndUpdate()
}

// BeginUpdate makes the version odd (an update in flight), as KVM does:
// (version + 1) | 1.
func (pg *Page) BeginUpdate() { pg.version.Store((pg.version.Load() + 1) | 1) }

// Store writes the fields but not the version.
func (pg *Page) Store(p Pvclock) {
	pg.tscTimestamp.Store(p.TSCTimestamp)
	pg.systemTime.Store(p.SystemTime)
	pg.mul.Store(p.Mul)
	pg.shiftFlags.Store(uint32(uint8(p.Shift)) | uint32(p.Flags)<<8)
}

// EndUpdate makes the version even again, one past the odd value.
func (pg *Page) EndUpdate() { pg.version.Store(pg.version.Load() + 1) }

// SetVersion sets the version word as is (tests: a version about to wrap).
func (pg *Page) SetVersion(v uint32) { pg.version.Store(v) }
