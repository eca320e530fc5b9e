package clockbound

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"unsafe"
)

// Segment is the segment in memory: the daemon's file mapped shared and
// read-only, or a test's segment in Go memory. Its words are atomics in
// the CPU's byte order, as the daemon's are (AtomicU16 for version and
// generation, read here in the 32-bit word that holds both).
type Segment struct {
	magic      [2]atomic.Uint32 // 0
	segSize    atomic.Uint32    // 8
	versionGen atomic.Uint32    // 12: version u16, generation u16
	asOfSec    atomic.Uint64    // 16
	asOfNsec   atomic.Uint64    // 24
	voidSec    atomic.Uint64    // 32
	voidNsec   atomic.Uint64    // 40
	bound      atomic.Uint64    // 48
	marker     atomic.Uint64    // 56
	driftState atomic.Uint64    // 64: max_drift_ppb u32, clock_status i32
	support    atomic.Uint64    // 72: clock_disruption_support_enabled u8, padding
}

// maxTries bounds the seqlock loop (the reference reader tries a
// million times; the daemon's update is a copy of 64 bytes). After it
// the reader reports ErrBusy and the caller keeps what it read before:
// the bound it had stays valid, growing with the drift.
const maxTries = 1024

// FromBytes overlays a Segment on b, a mapping of at least Size bytes
// aligned to 8.
func FromBytes(b []byte) (*Segment, error) {
	if len(b) < Size {
		return nil, fmt.Errorf("%w: a mapping of %d bytes, the segment is %d", ErrLayout, len(b), Size)
	}
	if uintptr(unsafe.Pointer(&b[0]))%8 != 0 {
		return nil, fmt.Errorf("%w: a mapping not aligned to 8 bytes", ErrLayout)
	}
	return (*Segment)(unsafe.Pointer(&b[0])), nil
}

// splitVersionGen splits the word at offset 12 into version and
// generation, in the CPU's byte order.
func splitVersionGen(w uint32) (version, generation uint16) {
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], w)
	return binary.NativeEndian.Uint16(b[0:]), binary.NativeEndian.Uint16(b[2:])
}

func joinVersionGen(version, generation uint16) uint32 {
	var b [4]byte
	binary.NativeEndian.PutUint16(b[0:], version)
	binary.NativeEndian.PutUint16(b[2:], generation)
	return binary.NativeEndian.Uint32(b[:])
}

// splitPair splits a 64-bit word into its two 32-bit halves in memory
// order (the lower address first).
func splitPair(w uint64) (first, second uint32) {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], w)
	return binary.NativeEndian.Uint32(b[0:]), binary.NativeEndian.Uint32(b[4:])
}

func joinPair(first, second uint32) uint64 {
	var b [8]byte
	binary.NativeEndian.PutUint32(b[0:], first)
	binary.NativeEndian.PutUint32(b[4:], second)
	return binary.NativeEndian.Uint64(b[:])
}

// firstByte is the byte at the lowest address of a 64-bit word.
func firstByte(w uint64) uint8 {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], w)
	return b[0]
}

// Generation is the segment's generation now (odd while the daemon
// writes): one load, for a reader that only asks whether the segment
// changed since its last Read.
func (g *Segment) Generation() (generation uint16, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer recoverFault(&err)
	_, generation = splitVersionGen(g.versionGen.Load())
	return generation, nil
}

// Read returns one consistent copy of the segment, as the reference
// reader's snapshot takes it: version and generation loaded, the header
// checked, the body copied, the word loaded again and unchanged. A
// generation that stays odd or keeps changing for maxTries tries is
// ErrBusy. A segment that the daemon truncated under the mapping (a
// daemon restarting wipes its file) faults; the fault is reported as
// ErrNoSegment, not a crash.
func (g *Segment) Read() (s Snapshot, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer recoverFault(&err)
	for range maxTries {
		vg := g.versionGen.Load()
		s = Snapshot{Magic: [2]uint32{g.magic[0].Load(), g.magic[1].Load()}, SegSize: g.segSize.Load()}
		s.Version, s.Generation = splitVersionGen(vg)
		if s.Generation&1 != 0 {
			continue
		}
		// The mapping holds Size bytes at least; a segment the daemon
		// says is larger only has more after them.
		if err := s.CheckHeader(1 << 32); err != nil {
			return Snapshot{}, err
		}
		times := [4]uint64{g.asOfSec.Load(), g.asOfNsec.Load(), g.voidSec.Load(), g.voidNsec.Load()}
		bound, marker := g.bound.Load(), g.marker.Load()
		drift, status := splitPair(g.driftState.Load())
		support := firstByte(g.support.Load())
		if g.versionGen.Load() != vg {
			continue
		}
		return s, s.decodeBody(times, bound, marker, drift, status, support)
	}
	return Snapshot{}, fmt.Errorf("%w: generation odd or changing for %d tries", ErrBusy, maxTries)
}

// recoverFault turns a memory fault in the deferring function (the
// mapped file truncated under it) into ErrNoSegment: the deferring
// function runs with debug.SetPanicOnFault, which makes such a fault a
// panic instead of the runtime's fatal error.
func recoverFault(err *error) {
	if r := recover(); r != nil {
		if re, ok := r.(interface{ Addr() uintptr }); ok {
			*err = fmt.Errorf("%w: the mapped segment faulted at %#x (truncated by the daemon?)", ErrNoSegment, re.Addr())
			return
		}
		// qemu-user delivers the SIGBUS of a truncated mapping with no
		// address, which the runtime reports as a nil dereference: in
		// the deferring function only the mapping is dereferenced.
		if re, ok := r.(runtime.Error); ok && strings.Contains(re.Error(), "invalid memory address") {
			*err = fmt.Errorf("%w: the mapped segment faulted (truncated by the daemon?): %v", ErrNoSegment, re)
			return
		}
		panic(r)
	}
}

// Write stores s as the daemon's ShmWriter::write does: the generation
// made odd, the body, the generation made even (skipping 0 on wrap);
// s.Generation is ignored, the segment's own count goes on. The header's
// magic, size and version are s's. Tests use it as the daemon.
func (g *Segment) Write(s Snapshot) {
	_, gen := splitVersionGen(g.versionGen.Load())
	if gen&1 == 0 {
		gen++
	}
	g.magic[0].Store(s.Magic[0])
	g.magic[1].Store(s.Magic[1])
	g.segSize.Store(s.SegSize)
	g.versionGen.Store(joinVersionGen(s.Version, gen))
	g.Tear(s)
	gen++
	if gen == 0 {
		gen = 2
	}
	g.versionGen.Store(joinVersionGen(s.Version, gen))
}

// Tear stores s's body without touching the generation: half of a
// write, for tests of a writer stopped inside one.
func (g *Segment) Tear(s Snapshot) {
	g.asOfSec.Store(uint64(s.AsOf / 1e9))
	g.asOfNsec.Store(uint64(s.AsOf % 1e9))
	g.voidSec.Store(uint64(s.VoidAfter / 1e9))
	g.voidNsec.Store(uint64(s.VoidAfter % 1e9))
	g.bound.Store(uint64(s.BoundNs))
	g.marker.Store(s.DisruptionMarker)
	g.driftState.Store(joinPair(s.MaxDriftPPB, uint32(s.Status)))
	var support uint8
	if s.DisruptionSupport {
		support = 1
	}
	var b [8]byte
	b[0] = support
	g.support.Store(binary.NativeEndian.Uint64(b[:]))
}

// SetVersionGeneration sets the header's version and generation word
// (generation 0 or version 0: a wiped segment; odd: a write in
// progress).
func (g *Segment) SetVersionGeneration(version, generation uint16) {
	g.versionGen.Store(joinVersionGen(version, generation))
}

// Encode writes s as the segment's bytes, in the CPU's order, into b (at
// least Size bytes): the inverse of Decode, for fixtures.
func Encode(b []byte, s Snapshot) {
	ne := binary.NativeEndian
	ne.PutUint32(b[offMagic:], s.Magic[0])
	ne.PutUint32(b[offMagic+4:], s.Magic[1])
	ne.PutUint32(b[offSegSize:], s.SegSize)
	ne.PutUint16(b[offVersion:], s.Version)
	ne.PutUint16(b[offGeneration:], s.Generation)
	ne.PutUint64(b[offAsOf:], uint64(s.AsOf/1e9))
	ne.PutUint64(b[offAsOf+8:], uint64(s.AsOf%1e9))
	ne.PutUint64(b[offVoidAfter:], uint64(s.VoidAfter/1e9))
	ne.PutUint64(b[offVoidAfter+8:], uint64(s.VoidAfter%1e9))
	ne.PutUint64(b[offBound:], uint64(s.BoundNs))
	ne.PutUint64(b[offMarker:], s.DisruptionMarker)
	ne.PutUint32(b[offMaxDrift:], s.MaxDriftPPB)
	ne.PutUint32(b[offStatus:], uint32(s.Status))
	b[offSupport] = 0
	if s.DisruptionSupport {
		b[offSupport] = 1
	}
}
