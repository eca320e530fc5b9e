package pvclock

import (
	"encoding/binary"
	"math/big"
	"os"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// alignedPage returns a test-owned, page-aligned 4096-byte buffer: the
// synthetic pages live in one, as the real ones do. buf keeps it alive.
func alignedPage(t testing.TB) (page unsafe.Pointer, buf []byte) {
	buf = make([]byte, 2*PageSize)
	addr := uintptr(unsafe.Pointer(&buf[0]))
	off := (PageSize - addr%PageSize) % PageSize
	t.Cleanup(func() { _ = buf[0] })
	return unsafe.Pointer(&buf[off]), buf
}

func TestPageLayoutMatchesTheABI(t *testing.T) {
	var pg Page
	assert.EqualValues(t, PvclockSize, unsafe.Sizeof(pg))
	assert.EqualValues(t, 0, unsafe.Offsetof(pg.version))
	assert.EqualValues(t, 8, unsafe.Offsetof(pg.tscTimestamp))
	assert.EqualValues(t, 16, unsafe.Offsetof(pg.systemTime))
	assert.EqualValues(t, 24, unsafe.Offsetof(pg.mul))
	assert.EqualValues(t, 28, unsafe.Offsetof(pg.shiftFlags))
	var hv HypervPage
	assert.EqualValues(t, HypervSize, unsafe.Sizeof(hv))
	assert.EqualValues(t, 0, unsafe.Offsetof(hv.sequence))
	assert.EqualValues(t, 8, unsafe.Offsetof(hv.scale))
	assert.EqualValues(t, 16, unsafe.Offsetof(hv.offset))
}

// TestDecodeTheRealPage decodes this machine's page (testdata) and reads
// the same bytes through a Page laid over them: the struct and the
// decoder agree on every field.
func TestDecodeTheRealPage(t *testing.T) {
	raw, err := os.ReadFile("testdata/pvclock-page-firecracker-6.18.bin")
	require.NoError(t, err)
	p, err := DecodePvclock(raw)
	require.NoError(t, err)
	assert.Equal(t, Pvclock{Version: 14, TSCTimestamp: 0x6e86ae240068, SystemTime: 0x4fc254c3, Mul: 0xbdfd7864, Shift: -1, Flags: 1}, p)
	assert.True(t, p.Stable())
	assert.NoError(t, p.Plausible())

	if hostLittleEndian { // the page is x86's: see FuzzPvclockPage
		mem, _ := alignedPage(t)
		copy(unsafe.Slice((*byte)(mem), PageSize), raw)
		assert.Equal(t, p, (*Page)(mem).Load())
	}
}

func TestPlausible(t *testing.T) {
	good := Pvclock{Version: 3, Mul: 1 << 31, Shift: 1, Flags: TSCStableBit}
	require.NoError(t, good.Plausible())
	for name, p := range map[string]Pvclock{
		"zero mul":      {Mul: 0, Flags: TSCStableBit},
		"shift 32":      {Mul: 1, Shift: 32},
		"shift -32":     {Mul: 1, Shift: -32},
		"unknown flags": {Mul: 1, Flags: 0x80},
	} {
		assert.ErrorIs(t, p.Plausible(), ErrImplausible, name)
	}
	_, err := DecodePvclock(make([]byte, PvclockSize-1))
	assert.ErrorIs(t, err, ErrImplausible)
	assert.ErrorIs(t, Hyperv{Sequence: 0, Scale: 1}.Plausible(), ErrImplausible)
	assert.ErrorIs(t, Hyperv{Sequence: 1, Scale: 0}.Plausible(), ErrImplausible)
	assert.NoError(t, Hyperv{Sequence: 1, Scale: 1}.Plausible())
}

// scaleDeltaBig is pvclock_scale_delta in big integers: the reference
// ScaleDelta is checked against.
func scaleDeltaBig(delta uint64, mul uint32, shift int8) uint64 {
	d := new(big.Int).SetUint64(delta)
	n := int(shift)
	if n < 0 {
		d.Rsh(d, uint(-n)%64)
	} else {
		d.Lsh(d, uint(n)%64)
		d.And(d, new(big.Int).SetUint64(^uint64(0)))
	}
	d.Mul(d, big.NewInt(int64(mul)))
	d.Rsh(d, 32)
	return d.Uint64()
}

func TestScaleDelta(t *testing.T) {
	for _, c := range []struct {
		delta uint64
		mul   uint32
		shift int8
	}{
		{0, 0xffffffff, 0}, {1, 1 << 31, 1}, {1<<64 - 1, 0xffffffff, 0}, {1<<64 - 1, 0xffffffff, 31},
		{0x6e86ae240068, 0xbdfd7864, -1}, {123456789, 4098200400, -1}, {1 << 40, 3, -31}, {5, 7, -128}, {5, 7, 127},
	} {
		assert.Equal(t, scaleDeltaBig(c.delta, c.mul, c.shift), ScaleDelta(c.delta, c.mul, c.shift), "%+v", c)
	}
	// 1 GHz exactly: shift 1, mul 2^31 is one ns per count.
	assert.Equal(t, uint64(1000), ScaleDelta(1000, 1<<31, 1))
}

func TestHypervConversion(t *testing.T) {
	// scale 2^64 * 0.25 / (TSC counts per 100 ns): a 2.5 GHz TSC counts
	// 250 per 100 ns, so scale = 2^64/250.
	h := Hyperv{Sequence: 7, Scale: ^uint64(0) / 250, Offset: -40}
	assert.Equal(t, uint64(1_000_000_000-1-40)*100, h.Nanoseconds(250_000_000_000))
	// The offset is signed and added modulo 2^64, as the kernel adds it.
	assert.Equal(t, uint64(9)*100, Hyperv{Sequence: 1, Scale: 1 << 63, Offset: -1}.Nanoseconds(20))
}

func TestDecodeHyperv(t *testing.T) {
	b := make([]byte, HypervSize)
	binary.LittleEndian.PutUint32(b[0:], 9)
	binary.LittleEndian.PutUint64(b[8:], 0x1234)
	binary.LittleEndian.PutUint64(b[16:], uint64(1<<64-5))
	h, err := DecodeHyperv(b)
	require.NoError(t, err)
	assert.Equal(t, Hyperv{Sequence: 9, Scale: 0x1234, Offset: -5}, h)
	_, err = DecodeHyperv(b[:HypervSize-1])
	assert.ErrorIs(t, err, ErrImplausible)
}

// TestTSCAt: TSCAt inverts the page's time: the least TSC value whose
// time reaches ns, forward of the stamp at every shift and multiplier
// a hypervisor writes, and, back before it, at the page's scale
// extended backwards.
func TestTSCAt(t *testing.T) {
	back := func(p Pvclock, tsc uint64) uint64 { // the page's time extended back
		return p.SystemTime - ScaleDelta(p.TSCTimestamp-tsc, p.Mul, p.Shift)
	}
	for _, p := range []Pvclock{
		{TSCTimestamp: 3404391452, SystemTime: 1392805294, Mul: 3512649351, Shift: -1}, // this machine's
		{TSCTimestamp: 1 << 40, SystemTime: 5e12, Mul: 4098200400, Shift: -1},
		{TSCTimestamp: 7e10, SystemTime: 1e9, Mul: 1 << 31, Shift: 1},  // 1 GHz
		{TSCTimestamp: 1e12, SystemTime: 1e9, Mul: 3 << 30, Shift: -3}, // 6 counts a ns... and more
		{TSCTimestamp: 5e10, SystemTime: 1e9, Mul: 0xffffffff, Shift: 0},
	} {
		for _, ns := range []uint64{p.SystemTime, p.SystemTime + 1, p.SystemTime + 12345, p.SystemTime + 3e9, p.SystemTime + 777_777_777_777} {
			tsc := p.TSCAt(ns)
			assert.GreaterOrEqual(t, p.Time(tsc), ns, "%+v: %d ns", p, ns)
			if tsc > p.TSCTimestamp {
				assert.Less(t, p.Time(tsc-1), ns, "%+v: %d ns: the least such TSC", p, ns)
			}
		}
		for _, ns := range []uint64{p.SystemTime - 1, p.SystemTime - 1000, p.SystemTime - 999_999_999} {
			tsc := p.TSCAt(ns)
			require.Less(t, tsc, p.TSCTimestamp+1, "%+v: %d ns", p, ns)
			assert.GreaterOrEqual(t, back(p, tsc), ns, "%+v: %d ns", p, ns)
			assert.Less(t, back(p, tsc-1), ns, "%+v: %d ns: the least such TSC", p, ns)
		}
	}
	far := Pvclock{TSCTimestamp: ^uint64(0) - 10, SystemTime: 0, Mul: 1 << 31, Shift: 1}
	assert.Equal(t, ^uint64(0), far.TSCAt(1e9), "saturates forward")
	near := Pvclock{TSCTimestamp: 10, SystemTime: 1e9, Mul: 1 << 31, Shift: 1}
	assert.Equal(t, uint64(0), near.TSCAt(0), "saturates back")
}
