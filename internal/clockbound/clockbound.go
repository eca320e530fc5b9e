// Package clockbound reads the AWS ClockBound daemon's shared segment,
// protocol version 2 (aws/clock-bound's docs/PROTOCOL.md; the reference
// client is clock-bound-shm's reader.rs and ClockErrorBound::now): the
// bound on CLOCK_REALTIME's error as of a CLOCK_MONOTONIC_COARSE instant,
// how fast it grows, until when it may be trusted, the daemon's clock
// status and the VMClock disruption marker it last saw.
//
// Decode reads a copy of the segment's bytes (a fixture, the fuzzer's
// input); a Segment reads the live, mapped segment under its generation
// seqlock, never a torn copy; Snapshot.At is the client's rule for the
// bound and status at a monotonic instant. Every refusal wraps one of the
// sentinel errors.
package clockbound

import (
	"encoding/binary"
	"errors"
	"math/bits"

	"github.com/schedclock/schedclock/internal/format"
)

// Sentinel errors; each error this package returns wraps one of them.
var (
	// ErrNoSegment: there is no segment to map (no daemon, not Linux, no
	// permission).
	ErrNoSegment = errors.New("clockbound: no segment")
	// ErrLayout: the bytes are not a protocol 2 segment (magic, version,
	// size, truncated).
	ErrLayout = errors.New("clockbound: not a ClockBound v2 segment")
	// ErrNotReady: the daemon has wiped the segment and not yet written
	// it (version or generation 0).
	ErrNotReady = errors.New("clockbound: segment not initialised")
	// ErrBusy: the daemon was writing the segment (generation odd, or it
	// changed under every try).
	ErrBusy = errors.New("clockbound: segment being written")
	// ErrImplausible: the segment's values cannot be the daemon's
	// (timestamps out of range, a negative bound, a drift of 100% or
	// more, an undefined status, a monotonic instant before as_of).
	ErrImplausible = errors.New("clockbound: implausible segment")
	// ErrStale: the bound is past void_after: the daemon stopped updating
	// it.
	ErrStale = errors.New("clockbound: bound past void_after")
	// ErrNoBound: the daemon says the clock status is unknown or
	// disrupted.
	ErrNoBound = errors.New("clockbound: no bound")
)

// DefaultPath is where the daemon keeps the protocol 2 segment.
const DefaultPath = "/var/run/clockbound/shm0"

// Magic is SHM_MAGIC: two u32s in the CPU's order ("AMZNCB\x02\x00" as
// the protocol's text spells the words' digits).
var Magic = [2]uint32{0x414D5A4E, 0x43420200}

// Version is the protocol version this package reads.
const Version = 2

// Offsets, in the CPU's byte order (the protocol says native endian): a
// 16-byte ShmHeader, then ClockErrorBound as #[repr(C)] lays it out.
const (
	offMagic      = 0  // [u32; 2]
	offSegSize    = 8  // u32
	offVersion    = 12 // u16
	offGeneration = 14 // u16: odd while written; 0 before the first write
	offAsOf       = 16 // timespec: i64 tv_sec, i64 tv_nsec (CLOCK_MONOTONIC_COARSE)
	offVoidAfter  = 32 // timespec
	offBound      = 48 // i64 bound_nsec
	offMarker     = 56 // u64 disruption_marker
	offMaxDrift   = 64 // u32 max_drift_ppb
	offStatus     = 68 // i32 clock_status
	offSupport    = 72 // u8 clock_disruption_support_enabled, then 7 bytes of padding

	// HeaderSize is the ShmHeader's size.
	HeaderSize = 16
	// Size is the header and ClockErrorBound, padded to 8: what the
	// daemon's segment_size writes.
	Size = 80
)

// clock_status values.
const (
	StatusUnknown      = 0
	StatusSynchronized = 1
	StatusFreeRunning  = 2
	StatusDisrupted    = 3
)

// GracePeriodNs is CLOCKBOUND_RESTART_GRACE_PERIOD: for 5 s after as_of
// the status is taken as written; after it, up to void_after, a
// synchronized clock counts as free running.
const GracePeriodNs = 5e9

// causalityBlurNs is the client's allowance for a monotonic reading a
// little behind as_of (CLOCK_MONOTONIC_COARSE's resolution): within it
// the age is 0, past it the reading is refused.
const causalityBlurNs = 1000

// Snapshot is one copy of the segment's fields, timestamps in ns.
type Snapshot struct {
	Magic      [2]uint32
	SegSize    uint32
	Version    uint16
	Generation uint16

	AsOf, VoidAfter   int64 // CLOCK_MONOTONIC_COARSE ns
	BoundNs           int64
	DisruptionMarker  uint64
	MaxDriftPPB       uint32
	Status            int32
	DisruptionSupport bool // clock_disruption_support_enabled: compare the marker with vmclock's
}

// maxSec bounds a timestamp's seconds (2^33 s, 272 years of uptime): so
// that seconds × 1e9 fits an int64.
const maxSec = 1 << 33

// maxBoundNs bounds bound_nsec (146 years).
const maxBoundNs = 1 << 62

// Decode decodes a segment from b (the file's bytes): the header as
// ShmHeader::is_valid checks it (magic, a version, a generation, a size
// that holds the header), then version 2 and a body of Size bytes within
// b; an odd generation is a copy taken during a write (ErrBusy). Check
// then says whether the body's values can be the daemon's.
func Decode(b []byte) (Snapshot, error) {
	if len(b) < HeaderSize {
		return Snapshot{}, format.Errorf("%w: %d bytes, the header needs %d", ErrLayout, len(b), HeaderSize)
	}
	ne := binary.NativeEndian
	s := headerOf(b)
	if err := s.CheckHeader(uint64(len(b))); err != nil {
		return Snapshot{}, err
	}
	if s.Generation&1 != 0 {
		return s, format.Errorf("%w: generation %d is odd", ErrBusy, s.Generation)
	}
	return s, s.decodeBody(
		[...]uint64{ne.Uint64(b[offAsOf:]), ne.Uint64(b[offAsOf+8:]), ne.Uint64(b[offVoidAfter:]), ne.Uint64(b[offVoidAfter+8:])},
		ne.Uint64(b[offBound:]), ne.Uint64(b[offMarker:]), ne.Uint32(b[offMaxDrift:]), ne.Uint32(b[offStatus:]), b[offSupport])
}

// headerOf decodes the header from b's first HeaderSize bytes.
func headerOf(b []byte) Snapshot {
	ne := binary.NativeEndian
	return Snapshot{
		Magic:      [2]uint32{ne.Uint32(b[offMagic:]), ne.Uint32(b[offMagic+4:])},
		SegSize:    ne.Uint32(b[offSegSize:]),
		Version:    ne.Uint16(b[offVersion:]),
		Generation: ne.Uint16(b[offGeneration:]),
	}
}

// decodeBody fills in the body from its raw values: the two timespecs
// (as_of's seconds and nanoseconds, then void_after's), bound_nsec, the
// marker, max_drift_ppb, clock_status and the support flag's byte; then
// Check.
func (s *Snapshot) decodeBody(times [4]uint64, bound, marker uint64, drift, status uint32, support uint8) error {
	s.BoundNs = int64(bound)
	s.DisruptionMarker = marker
	s.MaxDriftPPB = drift
	s.Status = int32(status)
	if !validTimespec(times[0], times[1]) || !validTimespec(times[2], times[3]) {
		return format.Errorf("%w: a timestamp out of range (as_of %d s %d ns, void_after %d s %d ns)",
			ErrImplausible, int64(times[0]), int64(times[1]), int64(times[2]), int64(times[3]))
	}
	s.AsOf = int64(times[0])*1e9 + int64(times[1])
	s.VoidAfter = int64(times[2])*1e9 + int64(times[3])
	if support > 1 {
		return format.Errorf("%w: clock_disruption_support_enabled is %d", ErrImplausible, support)
	}
	s.DisruptionSupport = support == 1
	return s.Check()
}

// CheckHeader checks the header against a segment of region bytes:
// ShmHeader::is_valid (magic, a version, a generation, a size that holds
// the header), then this package's version and a size that holds the
// body, within the region.
func (s Snapshot) CheckHeader(region uint64) error {
	switch {
	case s.Magic != Magic:
		return format.Errorf("%w: magic %#x %#x", ErrLayout, s.Magic[0], s.Magic[1])
	case s.Version == 0 || s.Generation == 0:
		return format.Errorf("%w: version %d, generation %d (wiped by a daemon starting)", ErrNotReady, s.Version, s.Generation)
	case s.Version != Version:
		return format.Errorf("%w: protocol version %d, this reader knows %d", ErrLayout, s.Version, Version)
	case s.SegSize < Size:
		return format.Errorf("%w: segment size %d, below the %d bytes of version %d", ErrLayout, s.SegSize, Size, Version)
	case uint64(s.SegSize) > region:
		return format.Errorf("%w: segment size %d, beyond the %d bytes there are (truncated)", ErrLayout, s.SegSize, region)
	}
	return nil
}

// Check says why the body's values cannot be the daemon's, or nil.
func (s Snapshot) Check() error {
	switch {
	case s.BoundNs < 0 || s.BoundNs >= maxBoundNs:
		return format.Errorf("%w: bound_nsec %d", ErrImplausible, s.BoundNs)
	case s.MaxDriftPPB >= 1e9:
		// The reference client's own sanity check (SegmentMalformed).
		return format.Errorf("%w: max_drift_ppb %d", ErrImplausible, s.MaxDriftPPB)
	case s.Status < StatusUnknown || s.Status > StatusDisrupted:
		return format.Errorf("%w: clock_status %d", ErrImplausible, s.Status)
	}
	return nil
}

// validTimespec reports whether sec, nsec (as stored, two's complement)
// is a timestamp this package can hold in ns: 0 ≤ nsec < 1e9 and
// 0 ≤ sec < maxSec.
func validTimespec(sec, nsec uint64) bool { return sec < maxSec && nsec < 1e9 }

// StatusName names a clock_status value.
func StatusName(status int32) string {
	switch status {
	case StatusUnknown:
		return "unknown"
	case StatusSynchronized:
		return "synchronized"
	case StatusFreeRunning:
		return "free running"
	case StatusDisrupted:
		return "disrupted"
	}
	return format.Sprintf("%d (undefined)", status)
}

// At is the reference client's rule (ClockErrorBound::compute_bound_at)
// at mono, a CLOCK_MONOTONIC reading taken after the CLOCK_REALTIME
// reading the bound is for: the status as written within the 5 s grace
// period after as_of, then free running up to void_after, then no bound
// (ErrStale); an unknown or disrupted status, no bound (ErrNoBound); a
// mono more than a microsecond before as_of, a breach of causality
// (ErrImplausible). The bound is bound_nsec plus max_drift_ppb for each
// second since as_of, rounded up. A mono read later than the instant it
// stands for (the caller's estimate) only makes the bound wider and the
// status weaker.
func (s Snapshot) At(mono int64) (boundNs int64, status int32, err error) {
	if err := s.Check(); err != nil {
		return 0, StatusUnknown, err
	}
	switch {
	case s.Status == StatusUnknown || s.Status == StatusDisrupted:
		return 0, s.Status, format.Errorf("%w: the daemon says the clock is %s", ErrNoBound, StatusName(s.Status))
	case mono >= s.VoidAfter:
		return 0, StatusUnknown, format.Errorf("%w: %d ns after void_after", ErrStale, mono-s.VoidAfter)
	case mono < s.AsOf-causalityBlurNs:
		return 0, StatusUnknown, format.Errorf("%w: CLOCK_MONOTONIC %d ns before as_of", ErrImplausible, s.AsOf-mono)
	}
	status = s.Status
	if mono >= s.AsOf+GracePeriodNs {
		status = StatusFreeRunning
	}
	return s.BoundNs + DriftNs(s.MaxDriftPPB, max(mono-s.AsOf, 0)), status, nil
}

// DriftNs is drift parts per billion over ageNs, rounded up, saturated to
// maxBoundNs.
func DriftNs(ppb uint32, ageNs int64) int64 {
	hi, lo := bits.Mul64(uint64(ppb), uint64(max(ageNs, 0)))
	if hi >= 1e9 {
		return maxBoundNs
	}
	q, r := bits.Div64(hi, lo, 1e9)
	if r != 0 {
		q++
	}
	return int64(min(q, maxBoundNs))
}
