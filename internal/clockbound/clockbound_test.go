package clockbound

import (
	"bytes"
	"encoding/binary"
	"flag"
	"math"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// timespec is libc::timespec on the 64-bit platforms ClockBound runs on.
type timespec struct{ Sec, Nsec int64 }

// abi is the protocol 2 segment as docs/PROTOCOL.md draws it and
// clock-bound-shm's #[repr(C)] ShmHeader and ClockErrorBound lay it out,
// field by field, for encoding/binary: the reference the fixtures and
// Encode are checked against.
type abi struct {
	Magic                         [2]uint32
	SegSize                       uint32
	Version                       uint16
	Generation                    uint16
	AsOf                          timespec
	VoidAfter                     timespec
	BoundNsec                     int64
	DisruptionMarker              uint64
	MaxDriftPPB                   uint32
	ClockStatus                   int32
	ClockDisruptionSupportEnabled uint8
	Padding                       [7]uint8
}

// abiV1 is protocol 1's segment (clock-bound 1.x, /var/run/clockbound/shm),
// which this package must refuse: the same header, another body.
type abiV1 struct {
	Magic       [2]uint32
	SegSize     uint32
	Version     uint16
	Generation  uint16
	AsOf        timespec
	VoidAfter   timespec
	BoundNsec   int64
	MaxDriftPPB uint32
	Reserved    uint32
	ClockStatus int32
	Padding     uint32
}

func encodeABI(t testing.TB, v any) []byte {
	var buf bytes.Buffer
	require.NoError(t, binary.Write(&buf, binary.LittleEndian, v))
	return buf.Bytes()
}

// The fixtures are synthetic segments written from the published layout
// (this machine runs no ClockBound daemon), little-endian as on x86_64
// and Graviton: a synchronized daemon with disruption support, one free
// running, one disrupted, one caught mid-write, one just wiped by a
// daemon starting, and a protocol 1 segment. They seed FuzzDecode.
var fixtures = map[string]any{
	"clockbound-v2-synchronized.bin": abi{
		Magic: Magic, SegSize: Size, Version: 2, Generation: 10,
		AsOf: timespec{3600, 250_000_000}, VoidAfter: timespec{3610, 250_000_000},
		BoundNsec: 25_000, DisruptionMarker: 0x5eed_0001, MaxDriftPPB: 15_000,
		ClockStatus: StatusSynchronized, ClockDisruptionSupportEnabled: 1,
	},
	"clockbound-v2-freerunning.bin": abi{
		Magic: Magic, SegSize: Size, Version: 2, Generation: 65534,
		AsOf: timespec{7200, 0}, VoidAfter: timespec{7300, 0},
		BoundNsec: 1_500_000, MaxDriftPPB: 50_000, ClockStatus: StatusFreeRunning,
	},
	"clockbound-v2-disrupted.bin": abi{
		Magic: Magic, SegSize: Size, Version: 2, Generation: 4,
		AsOf: timespec{100, 0}, VoidAfter: timespec{110, 0},
		BoundNsec: 10_000, DisruptionMarker: 2, MaxDriftPPB: 15_000,
		ClockStatus: StatusDisrupted, ClockDisruptionSupportEnabled: 1,
	},
	"clockbound-v2-being-written.bin": abi{
		Magic: Magic, SegSize: Size, Version: 2, Generation: 11,
		AsOf: timespec{3601, 0}, VoidAfter: timespec{3611, 0},
		BoundNsec: 25_000, MaxDriftPPB: 15_000, ClockStatus: StatusSynchronized,
	},
	"clockbound-v2-wiped.bin": abi{Magic: Magic, SegSize: Size},
	"clockbound-v1.bin": abiV1{
		Magic: Magic, SegSize: 64, Version: 1, Generation: 8,
		AsOf: timespec{50, 0}, VoidAfter: timespec{60, 0},
		BoundNsec: 20_000, MaxDriftPPB: 15_000, ClockStatus: StatusSynchronized,
	},
}

var update = flag.Bool("update", false, "rewrite testdata's fixtures from the layout")

// littleEndian skips t on a big-endian machine: the fixtures are in the
// byte order of the machines ClockBound runs on, and the segment is in
// the CPU's own.
func littleEndian(t testing.TB) {
	t.Helper()
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the fixtures are little-endian, the segment native: this machine is big-endian")
	}
}

func fixture(t testing.TB, name string) []byte {
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return raw
}

// TestFixturesAreTheLayout: the reference struct is 80 bytes with the
// fields at the offsets the reader uses; each fixture file is its
// declared fields in that layout, byte for byte (-update writes them);
// Decode reads them back, and Encode writes the same bytes.
func TestFixturesAreTheLayout(t *testing.T) {
	littleEndian(t)
	require.Equal(t, Size, binary.Size(abi{}))
	var a abi
	assert.Equal(t, uintptr(offGeneration), unsafe.Offsetof(a.Generation))
	assert.Equal(t, uintptr(offVoidAfter), unsafe.Offsetof(a.VoidAfter))
	assert.Equal(t, uintptr(offMarker), unsafe.Offsetof(a.DisruptionMarker))
	assert.Equal(t, uintptr(offStatus), unsafe.Offsetof(a.ClockStatus))
	assert.Equal(t, uintptr(offSupport), unsafe.Offsetof(a.ClockDisruptionSupportEnabled))
	var g Segment
	assert.Equal(t, uintptr(Size), unsafe.Sizeof(g))
	assert.Equal(t, uintptr(offVersion), unsafe.Offsetof(g.versionGen))
	assert.Equal(t, uintptr(offMaxDrift), unsafe.Offsetof(g.driftState))
	assert.Equal(t, uintptr(offSupport), unsafe.Offsetof(g.support))
	for name, v := range fixtures {
		want := encodeABI(t, v)
		path := filepath.Join("testdata", name)
		if *update {
			require.NoError(t, os.WriteFile(path, want, 0o644))
		}
		assert.Equal(t, want, fixture(t, name), "%s is not its fields in the published layout", name)
	}
	s, err := Decode(fixture(t, "clockbound-v2-synchronized.bin"))
	require.NoError(t, err)
	assert.Equal(t, Snapshot{
		Magic: Magic, SegSize: Size, Version: 2, Generation: 10, AsOf: 3600_250_000_000, VoidAfter: 3610_250_000_000,
		BoundNs: 25_000, DisruptionMarker: 0x5eed_0001, MaxDriftPPB: 15_000, Status: StatusSynchronized, DisruptionSupport: true,
	}, s)
	enc := make([]byte, Size)
	Encode(enc, s)
	assert.Equal(t, fixture(t, "clockbound-v2-synchronized.bin"), enc)
}

// TestDecodeRefusesDefects: every layout defect is an error naming it,
// never a snapshot: another magic, protocol 1, a wiped segment, one
// being written, a size below the body or beyond the bytes, truncated
// copies, values no daemon writes.
func TestDecodeRefusesDefects(t *testing.T) {
	littleEndian(t)
	good := fixture(t, "clockbound-v2-synchronized.bin")
	edit := func(f func(b []byte)) []byte { b := bytes.Clone(good); f(b); return b }
	le := binary.LittleEndian
	for name, tc := range map[string]struct {
		b    []byte
		want error
	}{
		"protocol 1":         {fixture(t, "clockbound-v1.bin"), ErrLayout},
		"wiped":              {fixture(t, "clockbound-v2-wiped.bin"), ErrNotReady},
		"being written":      {fixture(t, "clockbound-v2-being-written.bin"), ErrBusy},
		"magic":              {edit(func(b []byte) { b[3] ^= 0x40 }), ErrLayout},
		"version 3":          {edit(func(b []byte) { le.PutUint16(b[offVersion:], 3) }), ErrLayout},
		"generation 0":       {edit(func(b []byte) { le.PutUint16(b[offGeneration:], 0) }), ErrNotReady},
		"size below":         {edit(func(b []byte) { le.PutUint32(b[offSegSize:], Size-8) }), ErrLayout},
		"size beyond":        {edit(func(b []byte) { le.PutUint32(b[offSegSize:], Size+8) }), ErrLayout},
		"truncated":          {good[:Size-1], ErrLayout},
		"header only":        {good[:HeaderSize], ErrLayout},
		"short header":       {good[:HeaderSize-1], ErrLayout},
		"nsec out of range":  {edit(func(b []byte) { le.PutUint64(b[offAsOf+8:], 1e9) }), ErrImplausible},
		"negative sec":       {edit(func(b []byte) { le.PutUint64(b[offVoidAfter:], 1<<63) }), ErrImplausible},
		"negative bound":     {edit(func(b []byte) { le.PutUint64(b[offBound:], 1<<63) }), ErrImplausible},
		"drift of 100%":      {edit(func(b []byte) { le.PutUint32(b[offMaxDrift:], 1e9) }), ErrImplausible},
		"status undefined":   {edit(func(b []byte) { le.PutUint32(b[offStatus:], 4) }), ErrImplausible},
		"status negative":    {edit(func(b []byte) { le.PutUint32(b[offStatus:], 1<<31) }), ErrImplausible},
		"support flag 2":     {edit(func(b []byte) { b[offSupport] = 2 }), ErrImplausible},
		"garbage":            {bytes.Repeat([]byte{0x5a}, Size), ErrLayout},
		"zeros":              {make([]byte, Size), ErrLayout},
		"empty":              {nil, ErrLayout},
		"magic of 2 u32s BE": {edit(func(b []byte) { binary.BigEndian.PutUint32(b[0:], Magic[0]) }), ErrLayout},
	} {
		_, err := Decode(tc.b)
		assert.ErrorIs(t, err, tc.want, name)
	}
}

// TestAtIsTheClientsRule: ClockErrorBound::compute_bound_at's rule, step
// by step, on the synchronized fixture (as_of 3600.25 s, void_after
// 3610.25 s, 25 µs, 15 ppm).
func TestAtIsTheClientsRule(t *testing.T) {
	littleEndian(t)
	s, err := Decode(fixture(t, "clockbound-v2-synchronized.bin"))
	require.NoError(t, err)
	const asOf = 3600_250_000_000
	for _, tc := range []struct {
		name   string
		mono   int64
		bound  int64
		status int32
		err    error
	}{
		{"at as_of", asOf, 25_000, StatusSynchronized, nil},
		{"a second on: 15 µs of drift", asOf + 1e9, 40_000, StatusSynchronized, nil},
		{"rounded up", asOf + 1, 25_001, StatusSynchronized, nil},
		{"within the causality blur", asOf - 999, 25_000, StatusSynchronized, nil},
		{"before as_of", asOf - 1001, 0, StatusUnknown, ErrImplausible},
		{"last instant of the grace", asOf + GracePeriodNs - 1, 25_000 + 75_000, StatusSynchronized, nil},
		{"after the grace: free running", asOf + GracePeriodNs, 100_000, StatusFreeRunning, nil},
		{"last instant before void_after", asOf + 10e9 - 1, 175_000, StatusFreeRunning, nil},
		{"void_after", asOf + 10e9, 0, StatusUnknown, ErrStale},
	} {
		bound, status, err := s.At(tc.mono)
		if tc.err != nil {
			assert.ErrorIs(t, err, tc.err, tc.name)
			continue
		}
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.bound, bound, tc.name)
		assert.Equal(t, tc.status, status, tc.name)
	}
	for _, name := range []string{"clockbound-v2-disrupted.bin"} {
		s, err := Decode(fixture(t, name))
		require.NoError(t, err)
		_, _, err = s.At(s.AsOf)
		assert.ErrorIs(t, err, ErrNoBound, name)
	}
	s.Status = StatusUnknown
	_, _, err = s.At(asOf)
	assert.ErrorIs(t, err, ErrNoBound)
	free, err := Decode(fixture(t, "clockbound-v2-freerunning.bin"))
	require.NoError(t, err)
	_, status, err := free.At(free.AsOf)
	require.NoError(t, err)
	assert.Equal(t, int32(StatusFreeRunning), status)
}

// TestDriftNs holds the drift's arithmetic to exact values, its rounding
// up and its saturation.
func TestDriftNs(t *testing.T) {
	assert.Equal(t, int64(0), DriftNs(15_000, 0))
	assert.Equal(t, int64(0), DriftNs(15_000, -5))
	assert.Equal(t, int64(1), DriftNs(15_000, 1))
	assert.Equal(t, int64(15_000), DriftNs(15_000, 1e9))
	assert.Equal(t, int64(15_001), DriftNs(15_000, 1e9+1))
	assert.Equal(t, int64(8_999_999_991), DriftNs(999_999_999, 9_000_000_000))
	assert.Equal(t, int64(8_999_999_992), DriftNs(999_999_999, 9_000_000_001))
	assert.Equal(t, int64(4_611_686_013_815_701_886), DriftNs(999_999_999, 1<<62))
	assert.Equal(t, int64(maxBoundNs), DriftNs(999_999_999, math.MaxInt64))
}
