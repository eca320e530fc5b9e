package pvclock

import (
	"bytes"
	"encoding/binary"
	"math/big"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mapsLineRef is a second parser of /proc/self/maps lines, written as a
// regular expression rather than a field walk: FuzzMapsLine holds
// ParseMapsLine to it.
var mapsLineRef = regexp.MustCompile(`(?s)^ *([0-9a-fA-F]+)-([0-9a-fA-F]+) +([^ ]+) +[^ ]+ +[^ ]+ +[^ ]+(?: +(.*))?$`)

func parseMapsLineRef(line string) (Mapping, bool) {
	m := mapsLineRef.FindStringSubmatch(line)
	if m == nil || len(m[3]) != 4 {
		return Mapping{}, false
	}
	lo, err1 := strconv.ParseUint(m[1], 16, 64)
	hi, err2 := strconv.ParseUint(m[2], 16, 64)
	if err1 != nil || err2 != nil || lo >= hi {
		return Mapping{}, false
	}
	return Mapping{Lo: lo, Hi: hi, Perms: m[3], Name: m[4]}, true
}

func FuzzMapsLine(f *testing.F) {
	raw, err := os.ReadFile("testdata/maps-firecracker-6.18.txt")
	require.NoError(f, err)
	for line := range strings.Lines(string(raw)) {
		f.Add(strings.TrimSuffix(line, "\n"), "6.18.44-fc-v1294")
	}
	f.Add("7ffd1000-7ffd5000 r--p 00000000 00:00 0   [vvar]", "6.6.0")
	f.Fuzz(func(t *testing.T, line, release string) {
		got, ok := ParseMapsLine(line)
		want, wantOK := parseMapsLineRef(line)
		require.Equal(t, wantOK, ok, "%q", line)
		require.Equal(t, want, got, "%q", line)
		// Locate is total: any mapping, any release, never a panic, and
		// a location inside the mapping it names.
		if ok {
			if loc, err := Locate([]Mapping{got}, release); err == nil {
				assert.True(t, got.Lo <= loc.Pvclock && loc.Hyperv+PageSize <= got.Hi, "%+v outside %+v", loc, got)
			}
		}
	})
}

// pvclockABI is struct pvclock_vcpu_time_info for encoding/binary: the
// reference decoder.
type pvclockABI struct {
	Version      uint32
	Pad0         uint32
	TSCTimestamp uint64
	SystemTime   uint64
	Mul          uint32
	Shift        int8
	Flags        uint8
	Pad          [2]uint8
}

func pageSeeds(f *testing.F) [][]byte {
	raw, err := os.ReadFile("testdata/pvclock-page-firecracker-6.18.bin")
	require.NoError(f, err)
	// vCPU 0's and vCPU 1's pvclock_vcpu_time_info (64-byte
	// pvclock_vsyscall_time_info each), and the empty slot after them.
	return [][]byte{raw[0:PvclockSize], raw[64 : 64+PvclockSize], raw[128 : 128+PvclockSize]}
}

func FuzzPvclockPage(f *testing.F) {
	for _, s := range pageSeeds(f) {
		f.Add(s, uint64(0x6e86ae240068+123456789))
	}
	f.Fuzz(func(t *testing.T, b []byte, tsc uint64) {
		p, err := DecodePvclock(b)
		if len(b) < PvclockSize {
			require.ErrorIs(t, err, ErrImplausible)
			return
		}
		require.NoError(t, err)
		var ref pvclockABI
		require.NoError(t, binary.Read(bytes.NewReader(b), binary.LittleEndian, &ref))
		require.Equal(t, Pvclock{ref.Version, ref.TSCTimestamp, ref.SystemTime, ref.Mul, ref.Shift, ref.Flags}, p)

		// The Page overlay reads the same fields (on a little-endian host:
		// the page is x86's, and a big-endian host, s390x under qemu,
		// would read its bytes swapped).
		// Cycles against big integers: system_time + scaled delta, mod 2^64.
		want := new(big.Int).SetUint64(scaleDeltaBig(tsc-ref.TSCTimestamp, ref.Mul, ref.Shift))
		want.Add(want, new(big.Int).SetUint64(ref.SystemTime))
		require.Equal(t, new(big.Int).And(want, new(big.Int).SetUint64(^uint64(0))).Uint64(), p.Cycles(tsc))

		// TSCAt inverts Time: the least TSC value with the same time.
		if d := tsc - p.TSCTimestamp; p.Scalable() && d < 1<<32 && p.SystemTime < 1<<62 && ScaleDelta(d, p.Mul, p.Shift) < 1<<62 {
			ns := p.Time(tsc)
			inv := p.TSCAt(ns)
			require.LessOrEqual(t, inv, tsc)
			require.Equal(t, ns, p.Time(inv))
			if inv > p.TSCTimestamp {
				require.Less(t, p.Time(inv-1), ns)
			}
		}

		if !hostLittleEndian {
			return
		}
		mem, _ := alignedPage(t)
		copy(unsafe.Slice((*byte)(mem), PvclockSize), b)
		require.Equal(t, p, (*Page)(mem).Load())

		// The Go reader on that page with that TSC: the stable bit and
		// the scale decide, and a readable page gives Time.
		pg := (*Page)(mem)
		pg.version.Store(p.Version &^ 1)
		ns, version, ok := pg.ReadWith(func() uint64 { return tsc })
		require.Equal(t, p.Stable() && p.Scalable(), ok)
		if ok {
			require.Equal(t, p.Time(tsc), ns)
			require.Equal(t, p.Version&^1, version)
		}
		// Time is Cycles where the TSC moved forward of the stamp by
		// less than 2^62 counts, the page's system_time elsewhere.
		if d := tsc - p.TSCTimestamp; d < 1<<62 {
			require.Equal(t, p.Cycles(tsc)&(1<<63-1), p.Time(tsc))
		} else {
			require.Equal(t, p.SystemTime&(1<<63-1), p.Time(tsc))
		}
		// The assembly reader agrees on the stable bit and the scale and,
		// where the TSC does not count (a stamp 2^62 counts ahead of it),
		// on the value.
		if Supported {
			pg.tscTimestamp.Store(TSC() + 1<<62)
			ns, _, ok = Read(pg)
			require.Equal(t, p.Stable() && p.Scalable(), ok)
			if ok {
				require.Equal(t, p.SystemTime&(1<<63-1), ns)
			}
		}
	})
}

// hypervABI is struct ms_hyperv_tsc_page's head for encoding/binary.
type hypervABI struct {
	Sequence  uint32
	Reserved1 uint32
	Scale     uint64
	Offset    int64
}

func FuzzHypervPage(f *testing.F) {
	// Synthetic: no Hyper-V page exists on this KVM machine (testdata/README.md).
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0x3b, 0x92, 0x24, 0x49, 0x92, 0x24, 0x49, 0x01, 0xd8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, uint64(250_000_000_000))
	f.Add(make([]byte, HypervSize), uint64(1))
	f.Fuzz(func(t *testing.T, b []byte, tsc uint64) {
		h, err := DecodeHyperv(b)
		if len(b) < HypervSize {
			require.ErrorIs(t, err, ErrImplausible)
			return
		}
		require.NoError(t, err)
		var ref hypervABI
		require.NoError(t, binary.Read(bytes.NewReader(b), binary.LittleEndian, &ref))
		require.Equal(t, Hyperv{ref.Sequence, ref.Scale, ref.Offset}, h)

		// ((tsc * scale) >> 64 + offset) * 100, mod 2^64, in big integers.
		want := new(big.Int).Mul(new(big.Int).SetUint64(tsc), new(big.Int).SetUint64(ref.Scale))
		want.Rsh(want, 64)
		want.Add(want, big.NewInt(ref.Offset))
		want.Mul(want, big.NewInt(100))
		mod := new(big.Int).Lsh(big.NewInt(1), 64)
		require.Equal(t, new(big.Int).Mod(want, mod).Uint64(), h.Nanoseconds(tsc))

		if !hostLittleEndian {
			return // the overlay below is the x86 page's: see FuzzPvclockPage
		}
		mem, _ := alignedPage(t)
		copy(unsafe.Slice((*byte)(mem), HypervSize), b)
		pg := (*HypervPage)(mem)
		require.Equal(t, h, pg.Load())
		ns, _, ok := pg.ReadWith(func() uint64 { return tsc })
		require.Equal(t, h.Sequence != 0 && h.Scale != 0, ok)
		if ok {
			require.Equal(t, h.Nanoseconds(tsc), ns)
		}
	})
}

// hostLittleEndian says whether this host lays out integers as x86 does,
// the only place the clock pages exist.
var hostLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// FuzzParseUint holds parseUint to strconv.ParseUint, for both bases.
func FuzzParseUint(f *testing.F) {
	for _, s := range []string{"", "0", "7ffd1000", "FFFFFFFFFFFFFFFF", "10000000000000000", "18446744073709551615",
		"18446744073709551616", "+1", "-1", "1_0", "0x10", "g", " 1", "９"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, base := range []int{10, 16} {
			want, err := strconv.ParseUint(s, base, 64)
			got, ok := parseUint(s, uint64(base))
			if ok != (err == nil) || got != want && ok {
				t.Fatalf("parseUint(%q, %d) = %d, %v; strconv: %d, %v", s, base, got, ok, want, err)
			}
		}
	})
}
