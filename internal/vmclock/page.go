package vmclock

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"

	"github.com/schedclock/schedclock/internal/format"
)

// Page is struct vmclock_abi in memory: the mapped device, or a test's
// page in Go memory. Its words are atomics so that a test's writer
// goroutine and the readers stay clean under -race; on amd64 and arm64
// an atomic load is a plain load, which is all the hypervisor's page
// needs (it writes without asking Go). The sub-word fields are read in
// the word that holds them, converted from little-endian.
type Page struct {
	magic    atomic.Uint32 // 0x00
	size     atomic.Uint32 // 0x04
	versions atomic.Uint32 // 0x08: version (le16), counter_id, time_type
	seq      atomic.Uint32 // 0x0c
	marker   atomic.Uint64 // 0x10
	flags    atomic.Uint64 // 0x18
	status   atomic.Uint64 // 0x20: pad[2], clock_status, smearing hint, tai_offset_sec (le16), leap_indicator, counter_period_shift
	counter  atomic.Uint64 // 0x28
	period   atomic.Uint64 // 0x30
	periodEE atomic.Uint64 // 0x38
	periodME atomic.Uint64 // 0x40
	timeSec  atomic.Uint64 // 0x48
	timeFrac atomic.Uint64 // 0x50
	timeEE   atomic.Uint64 // 0x58
	timeME   atomic.Uint64 // 0x60
	vmGen    atomic.Uint64 // 0x68
}

// maxTries bounds every reader's seqcount loop. The specification asks
// the hypervisor to keep seq_count odd only as long as "it is reasonable
// for a guest to spin"; a reader still gives up after maxTries (a test's
// writer goroutine descheduled half-way, a hypervisor that never
// finishes) and reports ErrBusy, and its caller uses another source for
// that reading.
const maxTries = 1024

// FromBytes overlays a Page on b, a mapping of at least Size bytes
// aligned to 8 (the device's page is page-aligned).
func FromBytes(b []byte) (*Page, error) {
	if len(b) < Size {
		return nil, format.Errorf("%w: a mapping of %d bytes, the structure is %d", ErrLayout, len(b), Size)
	}
	if uintptr(unsafe.Pointer(&b[0]))%8 != 0 {
		return nil, format.Errorf("%w: a mapping not aligned to 8 bytes", ErrLayout)
	}
	return (*Page)(unsafe.Pointer(&b[0])), nil
}

// le converts a word loaded in the CPU's order to the value of its
// little-endian bytes (the same word on amd64 and arm64).
func le64(w uint64) uint64 {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], w)
	return binary.LittleEndian.Uint64(b[:])
}

func le32(w uint32) uint32 {
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], w)
	return binary.LittleEndian.Uint32(b[:])
}

// header returns the page's constant fields.
func (p *Page) header() (s Snapshot) {
	s.Magic = le32(p.magic.Load())
	s.Size = le32(p.size.Load())
	v := le32(p.versions.Load())
	s.Version, s.CounterID, s.TimeType = uint16(v), uint8(v>>16), uint8(v>>24)
	return s
}

// Header returns the page's constant fields (magic, size, version,
// counter_id, time_type), which need no seqcount.
func (p *Page) Header() Snapshot { return p.header() }

// load copies every field once, in the page's order; the caller checks
// seq_count around it.
func (p *Page) load(s *Snapshot) {
	*s = p.header()
	s.DisruptionMarker = le64(p.marker.Load())
	s.Flags = le64(p.flags.Load())
	st := le64(p.status.Load())
	s.ClockStatus, s.SmearingHint = uint8(st>>16), uint8(st>>24)
	s.TAIOffsetSec, s.LeapIndicator, s.PeriodShift = int16(uint16(st>>32)), uint8(st>>48), uint8(st>>56)
	s.CounterValue = le64(p.counter.Load())
	s.Period = le64(p.period.Load())
	s.PeriodEstError = le64(p.periodEE.Load())
	s.PeriodMaxError = le64(p.periodME.Load())
	s.TimeSec = le64(p.timeSec.Load())
	s.TimeFrac = le64(p.timeFrac.Load())
	s.TimeEstErrorNs = le64(p.timeEE.Load())
	s.TimeMaxErrorNs = le64(p.timeME.Load())
	s.VMGeneration = le64(p.vmGen.Load())
	s.clearAbsent()
}

// clearAbsent zeroes the fields past the page's size, as Decode leaves
// them.
func (s *Snapshot) clearAbsent() {
	if !s.has(offClockStatus + 1) {
		s.ClockStatus = 0
	}
	if !s.has(offSmearingHint + 1) {
		s.SmearingHint = 0
	}
	if !s.has(offTAIOffset + 2) {
		s.TAIOffsetSec = 0
	}
	if !s.has(offLeapIndicator + 1) {
		s.LeapIndicator = 0
	}
	if !s.has(offPeriodShift + 1) {
		s.PeriodShift = 0
	}
	for _, f := range [...]struct {
		end uint32
		v   *uint64
	}{
		{offCounterValue + 8, &s.CounterValue}, {offPeriod + 8, &s.Period},
		{offPeriodEstError + 8, &s.PeriodEstError}, {offPeriodMaxError + 8, &s.PeriodMaxError},
		{offTimeSec + 8, &s.TimeSec}, {offTimeFrac + 8, &s.TimeFrac},
		{offTimeEstError + 8, &s.TimeEstErrorNs}, {offTimeMaxError + 8, &s.TimeMaxErrorNs},
		{offVMGeneration + 8, &s.VMGeneration},
	} {
		if !s.has(f.end) {
			*f.v = 0
		}
	}
}

// Read returns one consistent copy of the page and, when counter is not
// nil, a reading of it taken inside the same seqcount window (the
// specification's "Calculating time": seq_count even, the counter, the
// fields, seq_count unchanged). Atomic loads are sequentially consistent
// in Go, which orders them as the kernel's virt_rmb does; counter must
// order its own read after the loads before it (LFENCE; RDTSC). After
// maxTries windows with seq_count odd or changed it returns ErrBusy:
// never a copy mixed from two versions.
func (p *Page) Read(counter func() uint64) (s Snapshot, count uint64, err error) {
	for range maxTries {
		seq := p.seq.Load()
		if le32(seq)&1 != 0 {
			continue
		}
		p.load(&s)
		if counter != nil {
			count = counter()
		}
		if p.seq.Load() == seq {
			s.Seq = le32(seq)
			return s, count, nil
		}
	}
	return Snapshot{}, 0, format.Errorf("%w: seq_count odd or changing for %d tries", ErrBusy, maxTries)
}

// Markers returns the page's disruption_marker and vm_generation_counter
// (0 where the page's size leaves it out) as one consistent pair: a
// cheaper Read for a page that gives no clock.
func (p *Page) Markers() (marker, generation uint64, err error) {
	hasGen := le32(p.size.Load()) >= Size
	for range maxTries {
		seq := p.seq.Load()
		if le32(seq)&1 != 0 {
			continue
		}
		marker = le64(p.marker.Load())
		if hasGen {
			generation = le64(p.vmGen.Load())
		}
		if p.seq.Load() == seq {
			return marker, generation, nil
		}
	}
	return 0, 0, format.Errorf("%w: seq_count odd or changing for %d tries", ErrBusy, maxTries)
}

// Write stores s into the page as the hypervisor does: seq_count made
// odd, the fields, seq_count made even (s.Seq is ignored: the page's
// own count goes on). Tests use it as the hypervisor; the device's page
// is read-only.
func (p *Page) Write(s Snapshot) {
	seq := le32(p.seq.Load()) | 1
	p.seq.Store(le32(seq))
	p.Tear(s)
	p.seq.Store(le32(seq + 1))
}

// Tear stores s's fields without touching seq_count: half of a write, for
// tests of readers against a writer that is stopped inside one (set
// seq_count odd with SetSeq first).
func (p *Page) Tear(s Snapshot) {
	p.magic.Store(le32(s.Magic))
	p.size.Store(le32(s.Size))
	p.versions.Store(le32(uint32(s.Version) | uint32(s.CounterID)<<16 | uint32(s.TimeType)<<24))
	p.marker.Store(le64(s.DisruptionMarker))
	p.flags.Store(le64(s.Flags))
	p.status.Store(le64(uint64(s.ClockStatus)<<16 | uint64(s.SmearingHint)<<24 |
		uint64(uint16(s.TAIOffsetSec))<<32 | uint64(s.LeapIndicator)<<48 | uint64(s.PeriodShift)<<56))
	p.counter.Store(le64(s.CounterValue))
	p.period.Store(le64(s.Period))
	p.periodEE.Store(le64(s.PeriodEstError))
	p.periodME.Store(le64(s.PeriodMaxError))
	p.timeSec.Store(le64(s.TimeSec))
	p.timeFrac.Store(le64(s.TimeFrac))
	p.timeEE.Store(le64(s.TimeEstErrorNs))
	p.timeME.Store(le64(s.TimeMaxErrorNs))
	p.vmGen.Store(le64(s.VMGeneration))
}

// SetSeq sets seq_count (odd: a write in progress).
func (p *Page) SetSeq(seq uint32) { p.seq.Store(le32(seq)) }

// Encode writes s as the page's bytes, little-endian, into b (at least
// Size bytes): the inverse of Decode, for fixtures.
func Encode(b []byte, s Snapshot) {
	le := binary.LittleEndian
	le.PutUint32(b[offMagic:], s.Magic)
	le.PutUint32(b[offSize:], s.Size)
	le.PutUint16(b[offVersion:], s.Version)
	b[offCounterID] = s.CounterID
	b[offTimeType] = s.TimeType
	le.PutUint32(b[offSeq:], s.Seq)
	le.PutUint64(b[offDisruptionMarker:], s.DisruptionMarker)
	le.PutUint64(b[offFlags:], s.Flags)
	b[offClockStatus] = s.ClockStatus
	b[offSmearingHint] = s.SmearingHint
	le.PutUint16(b[offTAIOffset:], uint16(s.TAIOffsetSec))
	b[offLeapIndicator] = s.LeapIndicator
	b[offPeriodShift] = s.PeriodShift
	le.PutUint64(b[offCounterValue:], s.CounterValue)
	le.PutUint64(b[offPeriod:], s.Period)
	le.PutUint64(b[offPeriodEstError:], s.PeriodEstError)
	le.PutUint64(b[offPeriodMaxError:], s.PeriodMaxError)
	le.PutUint64(b[offTimeSec:], s.TimeSec)
	le.PutUint64(b[offTimeFrac:], s.TimeFrac)
	le.PutUint64(b[offTimeEstError:], s.TimeEstErrorNs)
	le.PutUint64(b[offTimeMaxError:], s.TimeMaxErrorNs)
	le.PutUint64(b[offVMGeneration:], s.VMGeneration)
}
