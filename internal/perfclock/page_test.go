package perfclock

import (
	"encoding/binary"
	"math/big"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tscPage is a page as a TSC kernel writes it: a 2.3 GHz TSC
// (time_mult = 1e9<<31 / 2.3e9), time_zero putting TSC 0 about 3 s
// before perf's clock's origin, no cap_user_time_short (x86).
func tscPage(t testing.TB, caps uint64) []byte {
	page := make([]byte, 128)
	le := binary.NativeEndian
	le.PutUint32(page[0:], 0)          // version
	le.PutUint32(page[offLock:], 8)    // an even lock
	le.PutUint64(page[offCaps:], caps) // the capabilities
	le.PutUint16(page[offTimeShift:], 31)
	le.PutUint32(page[offTimeMult:], 933688543)
	le.PutUint64(page[offTimeZero:], uint64(1<<64-3_000_000_123))
	le.PutUint32(page[offSize:], 96)
	return page
}

// want is the conversion in exact arithmetic, modulo 2^64.
func want(c Conversion, cyc uint64) uint64 {
	if c.Short {
		cyc = c.Cycles + (cyc-c.Cycles)&c.Mask
	}
	q := new(big.Int).Rsh(new(big.Int).SetUint64(cyc), uint(c.Shift))
	r := new(big.Int).And(new(big.Int).SetUint64(cyc), new(big.Int).SetUint64(1<<c.Shift-1))
	m := new(big.Int).SetUint64(uint64(c.Mult))
	q.Mul(q, m)
	r.Mul(r, m).Rsh(r, uint(c.Shift))
	sum := q.Add(q, r).Add(q, new(big.Int).SetUint64(c.Zero))
	return new(big.Int).And(sum, new(big.Int).SetUint64(1<<64-1)).Uint64()
}

func TestParseRealKVMClockPage(t *testing.T) {
	// Captured on a kvm-clock guest (Linux 6.18, Firecracker): only
	// cap_bit0_is_deprecated set; no time_zero.
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the capture is an x86 page, little-endian; Parse reads this machine's own byte order (the synthetic pages cover it)")
	}
	page, err := os.ReadFile("testdata/kvmclock-6.18.page")
	require.NoError(t, err)
	_, err = Parse(page)
	assert.ErrorIs(t, err, ErrNoTimeZero)
}

func TestParseTSCPage(t *testing.T) {
	c, err := Parse(tscPage(t, 0x1e))
	require.NoError(t, err)
	assert.Equal(t, Conversion{Zero: 1<<64 - 3_000_000_123, Mult: 933688543, Shift: 31}, c)
	// 2.3e9 cycles are a second, less the mult's rounding.
	assert.InDelta(t, 1e9, float64(c.Time(23e8)-c.Time(0)), 1)
	for _, cyc := range []uint64{0, 1, 1<<31 - 1, 1 << 31, 123456789012345, 1<<63 + 77, 1<<64 - 1} {
		assert.Equal(t, want(c, cyc), c.Time(cyc), "cyc %d", cyc)
	}
}

func TestParseShortCounter(t *testing.T) {
	page := tscPage(t, 0x3e)
	le := binary.NativeEndian
	le.PutUint64(page[offTimeCycles:], 1<<56-100)
	le.PutUint64(page[offTimeMask:], 1<<56-1)
	c, err := Parse(page)
	require.NoError(t, err)
	require.True(t, c.Short)
	// A 56-bit counter that wrapped past time_cycles counts on.
	assert.InDelta(t, 200/2.3, float64(c.Time(100)-c.Time(1<<56-100)), 1)
}

func TestParseRefuses(t *testing.T) {
	for name, page := range map[string][]byte{
		"short":          make([]byte, HeaderLen-1),
		"old layout":     tscPage(t, 0x1c),
		"no time_zero":   tscPage(t, 0x0e),
		"short, no size": func() []byte { p := tscPage(t, 0x3e); binary.NativeEndian.PutUint32(p[offSize:], 80); return p }(),
		"shift 64":       func() []byte { p := tscPage(t, 0x1e); binary.NativeEndian.PutUint16(p[offTimeShift:], 64); return p }(),
	} {
		_, err := Parse(page)
		assert.Error(t, err, name)
	}
}

// FuzzPerfPage: Parse takes any bytes without panicking, and what it
// accepts converts as exact arithmetic does.
func FuzzPerfPage(f *testing.F) {
	real, err := os.ReadFile("testdata/kvmclock-6.18.page")
	require.NoError(f, err)
	f.Add(real, uint64(0))
	f.Add(tscPage(f, 0x1e), uint64(123456789012345))
	f.Add(tscPage(f, 0x3e), uint64(1<<64-1))
	f.Fuzz(func(t *testing.T, page []byte, cyc uint64) {
		c, err := Parse(page)
		if err != nil {
			return
		}
		require.Less(t, c.Shift, uint16(64))
		require.Equal(t, want(c, cyc), c.Time(cyc))
	})
}
