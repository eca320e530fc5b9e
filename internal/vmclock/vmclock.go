// Package vmclock reads the hypervisor's VMClock page: struct vmclock_abi
// (include/uapi/linux/vmclock-abi.h, Linux 6.13 and later; the guest
// kernel's reader is drivers/ptp/ptp_vmclock.c, the specification the
// uapi-group's UAPI.13), which the kernel lets a process map read-only
// from /dev/vmclock0. The page says when the guest's counter was
// disrupted (disruption_marker: a live migration; vm_generation_counter:
// a restore from a snapshot) and, where the hypervisor keeps the clock
// itself (EC2), how to turn a reading of the CPU's counter into UTC with
// an error bound: T1 ± time_maxerror + (P ± P_maxerror)(C − C1).
//
// Decode reads a copy of the page's bytes (a fixture, the fuzzer's
// input); a Page reads the live page under its seqcount, never a torn
// copy; Snapshot.TimeAt is the page's clock at a counter value, or why
// the page gives none. Every refusal wraps one of the sentinel errors.
package vmclock

import (
	"encoding/binary"
	"errors"
	"math"
	"math/bits"

	"github.com/schedclock/schedclock/internal/format"
)

// Sentinel errors; each error this package returns wraps one of them.
var (
	// ErrNoDevice: there is no page to map here (no /dev/vmclock0, not
	// Linux, no permission).
	ErrNoDevice = errors.New("vmclock: no device")
	// ErrLayout: the bytes are not a vmclock_abi this package reads (magic,
	// version, size, truncated).
	ErrLayout = errors.New("vmclock: not a vmclock_abi page")
	// ErrBusy: the hypervisor was writing the page (seq_count odd, or it
	// changed under every try).
	ErrBusy = errors.New("vmclock: page being written")
	// ErrNoClock: the page is well formed but gives no time here: its
	// counter is not this CPU's, its status is not synchronized or free
	// running, its time is not UTC, or a bound it needs is not valid.
	ErrNoClock = errors.New("vmclock: no clock")
	// ErrImplausible: the page's values cannot be a clock's (a zero
	// period, a counter decades from the reference, arithmetic that
	// overflows).
	ErrImplausible = errors.New("vmclock: implausible page")
)

// DevicePath is where the kernel's driver puts the page, for the first
// vmclock device.
const DevicePath = "/dev/vmclock0"

// Magic is VMCLOCK_MAGIC, "VCLK" in little-endian order.
const Magic = 0x4b4c4356

// Version is the one layout version there is.
const Version = 1

// Offsets of struct vmclock_abi's fields (little-endian throughout), and
// the end of the last field of each group the kernel checks for with
// VMCLOCK_FIELD_PRESENT: the page's size field says which are present.
const (
	offMagic            = 0x00 // __le32 magic
	offSize             = 0x04 // __le32 size: of the region holding the structure
	offVersion          = 0x08 // __le16 version
	offCounterID        = 0x0a // __u8 counter_id
	offTimeType         = 0x0b // __u8 time_type
	offSeq              = 0x0c // __le32 seq_count: odd while written
	offDisruptionMarker = 0x10 // __le64
	offFlags            = 0x18 // __le64
	offClockStatus      = 0x22 // __u8, after __u8 pad[2]
	offSmearingHint     = 0x23 // __u8
	offTAIOffset        = 0x24 // __le16, two's complement
	offLeapIndicator    = 0x26 // __u8
	offPeriodShift      = 0x27 // __u8
	offCounterValue     = 0x28 // __le64
	offPeriod           = 0x30 // __le64, units of 2^-(64+shift) s
	offPeriodEstError   = 0x38 // __le64, same units
	offPeriodMaxError   = 0x40 // __le64, same units
	offTimeSec          = 0x48 // __le64
	offTimeFrac         = 0x50 // __le64, units of 2^-64 s
	offTimeEstError     = 0x58 // __le64 ns
	offTimeMaxError     = 0x60 // __le64 ns
	offVMGeneration     = 0x68 // __le64

	// MinSize is VMCLOCK_MIN_SIZE, offsetof(pad): magic to flags, the
	// least the kernel's driver accepts.
	MinSize = 0x20
	// endMaxError is the end of time_maxerror_nanosec, the last field a
	// bound needs.
	endMaxError = offTimeMaxError + 8
	// Size is sizeof(struct vmclock_abi): every field, vm_generation_counter
	// included.
	Size = offVMGeneration + 8
)

// counter_id values.
const (
	CounterARMVCNT = 0    // VMCLOCK_COUNTER_ARM_VCNT: the arm64 virtual counter
	CounterX86TSC  = 1    // VMCLOCK_COUNTER_X86_TSC
	CounterInvalid = 0xff // VMCLOCK_COUNTER_INVALID: markers only
)

// time_type values.
const (
	TimeUTC       = 0 // VMCLOCK_TIME_UTC
	TimeTAI       = 1 // VMCLOCK_TIME_TAI
	TimeMonotonic = 2 // VMCLOCK_TIME_MONOTONIC: no epoch, no wall time
)

// flags bits, as include/uapi/linux/vmclock-abi.h numbers them (the
// UAPI.13 text's table puts VM_GEN_COUNTER_PRESENT at bit 7, the
// header, which the kernel and QEMU compile, at 8; nothing here depends on
// either: the generation counter is read where the size says it is).
const (
	FlagTAIOffsetValid     = 1 << 0
	FlagDisruptionSoon     = 1 << 1
	FlagDisruptionImminent = 1 << 2
	FlagPeriodEstErrValid  = 1 << 3
	FlagPeriodMaxErrValid  = 1 << 4
	FlagTimeEstErrValid    = 1 << 5
	FlagTimeMaxErrValid    = 1 << 6
	FlagTimeMonotonic      = 1 << 7
	FlagVMGenCounter       = 1 << 8
)

// clock_status values.
const (
	StatusUnknown      = 0
	StatusInitializing = 1
	StatusSynchronized = 2
	StatusFreeRunning  = 3
	StatusUnreliable   = 4
)

// leap_indicator values.
const (
	LeapNone    = 0
	LeapPrePos  = 1 // a positive leap second at the end of this month
	LeapPreNeg  = 2
	LeapPos     = 3 // during 23:59:60
	LeapPostPos = 4
	LeapPostNeg = 5
)

// Snapshot is one copy of the page's fields. Fields past Size (the page's
// size field) are zero.
type Snapshot struct {
	Magic     uint32
	Size      uint32
	Version   uint16
	CounterID uint8
	TimeType  uint8
	Seq       uint32

	DisruptionMarker uint64
	Flags            uint64

	ClockStatus   uint8
	SmearingHint  uint8
	TAIOffsetSec  int16
	LeapIndicator uint8
	PeriodShift   uint8

	CounterValue   uint64
	Period         uint64
	PeriodEstError uint64
	PeriodMaxError uint64
	TimeSec        uint64
	TimeFrac       uint64
	TimeEstErrorNs uint64
	TimeMaxErrorNs uint64

	VMGeneration uint64
}

// has reports whether the page's size covers the field ending at end.
func (s Snapshot) has(end uint32) bool { return s.Size >= end }

// HasVMGeneration reports whether the page has vm_generation_counter.
func (s Snapshot) HasVMGeneration() bool { return s.has(Size) }

// Decode decodes a vmclock_abi page from b, the region the page's size
// field describes (a fixture, a read of the device): magic, version 1,
// a size of at least MinSize and within b, and an even seq_count (an odd
// one is a copy taken while the hypervisor wrote it: ErrBusy).
func Decode(b []byte) (Snapshot, error) {
	if len(b) < MinSize {
		return Snapshot{}, format.Errorf("%w: %d bytes, the header needs %d", ErrLayout, len(b), MinSize)
	}
	le := binary.LittleEndian
	s := Snapshot{
		Magic:            le.Uint32(b[offMagic:]),
		Size:             le.Uint32(b[offSize:]),
		Version:          le.Uint16(b[offVersion:]),
		CounterID:        b[offCounterID],
		TimeType:         b[offTimeType],
		Seq:              le.Uint32(b[offSeq:]),
		DisruptionMarker: le.Uint64(b[offDisruptionMarker:]),
		Flags:            le.Uint64(b[offFlags:]),
	}
	if err := s.CheckHeader(uint64(len(b))); err != nil {
		return Snapshot{}, err
	}
	u8 := func(off uint32) uint8 {
		if s.has(off + 1) {
			return b[off]
		}
		return 0
	}
	u64 := func(off uint32) uint64 {
		if s.has(off + 8) {
			return le.Uint64(b[off:])
		}
		return 0
	}
	s.ClockStatus = u8(offClockStatus)
	s.SmearingHint = u8(offSmearingHint)
	if s.has(offTAIOffset + 2) {
		s.TAIOffsetSec = int16(le.Uint16(b[offTAIOffset:]))
	}
	s.LeapIndicator = u8(offLeapIndicator)
	s.PeriodShift = u8(offPeriodShift)
	s.CounterValue = u64(offCounterValue)
	s.Period = u64(offPeriod)
	s.PeriodEstError = u64(offPeriodEstError)
	s.PeriodMaxError = u64(offPeriodMaxError)
	s.TimeSec = u64(offTimeSec)
	s.TimeFrac = u64(offTimeFrac)
	s.TimeEstErrorNs = u64(offTimeEstError)
	s.TimeMaxErrorNs = u64(offTimeMaxError)
	s.VMGeneration = u64(offVMGeneration)
	if s.Seq&1 != 0 {
		return s, format.Errorf("%w: seq_count %d is odd", ErrBusy, s.Seq)
	}
	return s, nil
}

// CheckHeader checks the page's constant fields as the kernel's
// vmclock_probe does, against a region of region bytes: the magic,
// version 1, and a size from MinSize up to the region.
func (s Snapshot) CheckHeader(region uint64) error {
	switch {
	case s.Magic != Magic:
		return format.Errorf("%w: magic %#x, not %#x (\"VCLK\")", ErrLayout, s.Magic, Magic)
	case s.Version != Version:
		return format.Errorf("%w: version %d, this reader knows %d", ErrLayout, s.Version, Version)
	case s.Size < MinSize:
		return format.Errorf("%w: size %d, below the %d bytes of the header", ErrLayout, s.Size, MinSize)
	case uint64(s.Size) > region:
		return format.Errorf("%w: size %d, beyond the %d bytes there are (truncated)", ErrLayout, s.Size, region)
	}
	return nil
}

// Reading is the page's clock at one counter value: the true UTC time is
// within UnixNano ± MaxErrorNs.
type Reading struct {
	UnixNano   int64  // UTC, ns since 1970, rounded down
	MaxErrorNs uint64 // the page's bound at that counter value, this package's rounding included
	Status     uint8  // StatusSynchronized or StatusFreeRunning
}

// maxSec bounds the seconds a reading may have (year 2242): so that
// seconds × 1e9 fits an int64 with room for the error.
const maxSec = 1 << 33

// maxErrorNs bounds an error this package computes (146 years): beyond it
// the page is not a clock.
const maxErrorNs = 1 << 62

// TimeAt is the page's UTC time at counter value counter, as the
// specification's "Calculating time" and "Time error calculation" say:
// T1 + P(C − C1), within time_maxerror + P_maxerror·|C − C1| (rounded
// up), plus a nanosecond for rounding the time down, plus a second while
// a leap second is near (UTC may repeat or skip one across it). The page
// must name counterID (the counter counter was read from), say
// synchronized or free running, give UTC (or TAI with its offset: UTC is
// TAI minus the offset's magnitude, whichever sign a hypervisor writes,
// since TAI has been ahead of UTC since 1972), and mark both maximum
// errors valid; otherwise the error says why it gives no time.
func (s Snapshot) TimeAt(counter uint64, counterID uint8) (Reading, error) {
	if err := s.CheckHeader(math.MaxUint32); err != nil {
		// The constant fields, which a reader of the live page does not
		// check again (a page overwritten with garbage).
		return Reading{}, err
	}
	switch {
	case s.Seq&1 != 0:
		return Reading{}, format.Errorf("%w: seq_count %d is odd", ErrBusy, s.Seq)
	case s.CounterID == CounterInvalid:
		return Reading{}, format.Errorf("%w: the page advertises no counter (counter_id 0xff: markers only)", ErrNoClock)
	case s.CounterID != counterID:
		return Reading{}, format.Errorf("%w: counter_id %d, not this CPU's counter (%d)", ErrNoClock, s.CounterID, counterID)
	case !s.has(endMaxError):
		return Reading{}, format.Errorf("%w: size %d leaves out the time fields (%d bytes)", ErrNoClock, s.Size, endMaxError)
	case s.ClockStatus != StatusSynchronized && s.ClockStatus != StatusFreeRunning:
		return Reading{}, format.Errorf("%w: clock_status is %s", ErrNoClock, StatusName(s.ClockStatus))
	case s.TimeType != TimeUTC && s.TimeType != TimeTAI:
		return Reading{}, format.Errorf("%w: time_type %d is neither UTC nor TAI", ErrNoClock, s.TimeType)
	case s.TimeType == TimeTAI && s.Flags&FlagTAIOffsetValid == 0:
		return Reading{}, format.Errorf("%w: TAI without a valid UTC offset", ErrNoClock)
	case s.Flags&FlagTimeMaxErrValid == 0:
		return Reading{}, format.Errorf("%w: time_maxerror_nanosec is not marked valid", ErrNoClock)
	case s.Flags&FlagPeriodMaxErrValid == 0:
		return Reading{}, format.Errorf("%w: counter_period_maxerror_rate_frac_sec is not marked valid", ErrNoClock)
	case s.LeapIndicator > LeapPostNeg:
		return Reading{}, format.Errorf("%w: leap_indicator %d", ErrImplausible, s.LeapIndicator)
	case s.Period == 0 || s.PeriodShift >= 128:
		return Reading{}, format.Errorf("%w: counter period %d >> %d is zero", ErrImplausible, s.Period, s.PeriodShift)
	case s.TimeSec >= maxSec:
		return Reading{}, format.Errorf("%w: time_sec %d is past year 2242", ErrImplausible, s.TimeSec)
	case s.TimeMaxErrorNs >= maxErrorNs:
		return Reading{}, format.Errorf("%w: time_maxerror_nanosec %d", ErrImplausible, s.TimeMaxErrorNs)
	}
	delta, back := counter-s.CounterValue, false
	if int64(delta) < 0 {
		delta, back = -delta, true // a counter read behind the reference (another CPU's, a few counts)
	}
	if delta >= 1<<62 {
		return Reading{}, format.Errorf("%w: counter %d is %d counts from counter_value %d", ErrImplausible, counter, delta, s.CounterValue)
	}
	// The motion and its error in units of 2^-64 s: delta × period,
	// shifted right by the page's shift (the kernel's
	// mul_u64_u64_shr_add_u64); the error rounded up.
	moveHi, moveLo := bits.Mul64(delta, s.Period)
	moveHi, moveLo = shr128(moveHi, moveLo, s.PeriodShift, false)
	errHi, errLo := bits.Mul64(delta, s.PeriodMaxError)
	errHi, errLo = shr128(errHi, errLo, s.PeriodShift, true)
	if moveHi >= maxSec || errHi >= maxSec {
		return Reading{}, format.Errorf("%w: %d counts at the page's period are centuries", ErrImplausible, delta)
	}
	sec, frac := s.TimeSec, s.TimeFrac
	if back {
		var borrow uint64
		frac, borrow = bits.Sub64(frac, moveLo, 0)
		if sec < moveHi+borrow {
			return Reading{}, format.Errorf("%w: the counter is before 1970 on the page's clock", ErrImplausible)
		}
		sec -= moveHi + borrow
	} else {
		var carry uint64
		frac, carry = bits.Add64(frac, moveLo, 0)
		sec += moveHi + carry
	}
	if s.TimeType == TimeTAI {
		off := uint64(abs16(s.TAIOffsetSec))
		if sec < off {
			return Reading{}, format.Errorf("%w: TAI before 1970", ErrImplausible)
		}
		sec -= off
	}
	if sec >= maxSec {
		return Reading{}, format.Errorf("%w: the page's time is past year 2242", ErrImplausible)
	}
	nsFrac, _ := bits.Mul64(frac, 1e9) // floor(frac × 1e9 / 2^64)
	ns := int64(sec)*1e9 + int64(nsFrac)
	errNsHi, errNsLo := bits.Mul64(errLo, 1e9)
	errNs := errHi*1e9 + errNsHi // errHi < 2^33: no overflow
	if errNsLo != 0 {
		errNs++ // rounded up
	}
	errNs += s.TimeMaxErrorNs + 1 // and the time's rounding down
	if s.LeapIndicator == LeapPrePos || s.LeapIndicator == LeapPreNeg || s.LeapIndicator == LeapPos {
		errNs += 1e9
	}
	if errNs >= maxErrorNs {
		return Reading{}, format.Errorf("%w: an error of %d ns", ErrImplausible, errNs)
	}
	return Reading{UnixNano: ns, MaxErrorNs: errNs, Status: s.ClockStatus}, nil
}

// shr128 shifts the 128-bit hi:lo right by n (0 to 127), rounding up
// when roundUp is set and a set bit is shifted out.
func shr128(hi, lo uint64, n uint8, roundUp bool) (uint64, uint64) {
	var lost bool
	switch {
	case n == 0:
	case n < 64:
		lost = lo<<(64-n) != 0
		lo = lo>>n | hi<<(64-n)
		hi >>= n
	default:
		lost = lo != 0 || hi<<(128-uint(n)) != 0
		lo = hi >> (n - 64)
		hi = 0
	}
	if roundUp && lost {
		var carry uint64
		lo, carry = bits.Add64(lo, 1, 0)
		hi += carry
	}
	return hi, lo
}

func abs16(v int16) int32 {
	if v < 0 {
		return -int32(v)
	}
	return int32(v)
}

// StatusName names a clock_status value.
func StatusName(status uint8) string {
	switch status {
	case StatusUnknown:
		return "unknown"
	case StatusInitializing:
		return "initializing"
	case StatusSynchronized:
		return "synchronized"
	case StatusFreeRunning:
		return "free running"
	case StatusUnreliable:
		return "unreliable"
	}
	return format.Sprintf("%d (undefined)", status)
}
