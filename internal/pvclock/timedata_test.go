package pvclock

import (
	"encoding/binary"
	"math"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/schedclock/schedclock/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// realTimeData is the vDSO time data captured on the development machine
// (testdata/README.md), with CLOCK_MONOTONIC_COARSE's base at 136.
func realTimeData(t testing.TB) (b []byte, sec, nsec uint64) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		// The kernel writes its time data in its own byte order, which
		// this package reads; the capture is an x86 page.
		t.Skip("the capture is an x86 (little-endian) page; this machine is big-endian")
	}
	b, err := os.ReadFile("testdata/vdso-time-data-firecracker-6.18.bin")
	require.NoError(t, err)
	require.Len(t, b, TimeDataSize)
	return b, binary.NativeEndian.Uint64(b[136:]), binary.NativeEndian.Uint64(b[144:])
}

func TestFindCoarse(t *testing.T) {
	b, sec, nsec := realTimeData(t)
	found := func(b []byte, sec, nsec uint64) bool {
		_, ok := FindCoarse(b, sec, nsec)
		return ok
	}
	at, ok := FindCoarse(b, sec, nsec)
	assert.True(t, ok, "the captured page holds its coarse time")
	assert.Equal(t, 136, at)
	assert.False(t, found(b, sec, nsec+1), "another time")
	assert.False(t, found(b, sec+1, nsec), "another second")
	odd := append([]byte(nil), b...)
	binary.NativeEndian.PutUint32(odd, binary.NativeEndian.Uint32(odd)|1)
	assert.False(t, found(odd, sec, nsec), "a page in the middle of an update")
	assert.False(t, found(b[:16], sec, nsec), "too short to hold a base")
	assert.False(t, found(nil, 0, 0))
	// The pair must lie past the head (seq, mode, cycle_last): a page
	// whose head happens to read as the time is not the time data.
	head := make([]byte, 64)
	binary.NativeEndian.PutUint64(head[0:], 2)
	binary.NativeEndian.PutUint64(head[8:], 7)
	binary.NativeEndian.PutUint64(head[16:], 9)
	assert.False(t, found(head, 2, 7))
	assert.False(t, found(head, 7, 9))
	assert.True(t, found(head, 9, 0), "the pair at 16 is past the head")
}

// TestFindLayout: the captured 6.18 page's conversion is where the
// README says (mult 0x800000 and shift 23 at 32, basetime at 40), and a
// layout without max_cycles (before 6.10: everything from mask on 8
// bytes earlier) is found 8 bytes earlier; a coarse pair too close to
// the head, a mask that is not a run of low bits, a mult of 0 or a
// shift past 32 is no conversion.
func TestFindLayout(t *testing.T) {
	b, sec, nsec := realTimeData(t)
	l, ok := FindLayout(b, sec, nsec)
	require.True(t, ok)
	assert.Equal(t, 40, l.Basetime())
	assert.Equal(t, uint32(0x800000), binary.NativeEndian.Uint32(b[l.multAt():]))
	assert.Equal(t, uint32(23), binary.NativeEndian.Uint32(b[l.shiftAt():]))

	old := append(append([]byte(nil), b[:16]...), b[24:]...) // no max_cycles
	old = append(old, make([]byte, 8)...)
	l, ok = FindLayout(old, sec, nsec)
	require.True(t, ok, "a layout before 6.10")
	assert.Equal(t, 32, l.Basetime())
	assert.Equal(t, uint32(23), binary.NativeEndian.Uint32(old[l.shiftAt():]))

	for _, bad := range []struct {
		name string
		off  int
		put  func([]byte)
	}{
		{"a mask with a hole", 24, func(b []byte) { binary.NativeEndian.PutUint64(b, 1<<40|1) }},
		{"a narrow mask", 24, func(b []byte) { binary.NativeEndian.PutUint64(b, 1<<16-1) }},
		{"mult 0", 32, func(b []byte) { binary.NativeEndian.PutUint32(b, 0) }},
		{"shift 33", 36, func(b []byte) { binary.NativeEndian.PutUint32(b, 33) }},
	} {
		c := append([]byte(nil), b...)
		bad.put(c[bad.off:])
		_, ok := FindLayout(c, sec, nsec)
		assert.False(t, ok, bad.name)
	}
	head := make([]byte, TimeDataSize)
	binary.NativeEndian.PutUint64(head[24:], 5)
	binary.NativeEndian.PutUint64(head[32:], 6)
	_, ok = FindLayout(head, 5, 6)
	assert.False(t, ok, "a coarse pair too close to the head for six bases before it")
	_, ok = FindLayout(b[:200], sec, nsec)
	assert.False(t, ok, "basetime cut short")
	// Six bases before the pair, but basetime (24) inside the head:
	// mask, mult and shift would be cycle_last and max_cycles.
	head = make([]byte, TimeDataSize)
	binary.NativeEndian.PutUint64(head[8:], ^uint64(0))
	binary.NativeEndian.PutUint32(head[16:], 1<<23)
	binary.NativeEndian.PutUint32(head[20:], 23)
	binary.NativeEndian.PutUint64(head[120:], 5)
	binary.NativeEndian.PutUint64(head[128:], 6)
	_, ok = FindLayout(head, 5, 6)
	assert.False(t, ok, "basetime inside the head")
}

// TestConvAt: the vDSO's arithmetic on the captured page's conversion,
// and its edges: no motion below cycle_last, the 128-bit product past
// 64 bits.
func TestConvAt(t *testing.T) {
	b, _, _ := realTimeData(t)
	l, _ := FindLayout(b, binary.NativeEndian.Uint64(b[136:]), binary.NativeEndian.Uint64(b[144:]))
	td := (*TimeData)(unsafe.Pointer(&b[0]))
	c, ok := td.Load(l)
	require.True(t, ok)
	assert.EqualValues(t, ModePvclock, c.Mode)
	assert.Equal(t, uint32(0x800000), c.Mult)
	mono := int64(c.Base[0].Sec*1e9 + c.Base[0].Nsec>>23)
	assert.Equal(t, mono, c.At(0, c.CycleLast), "at cycle_last: the base")
	assert.Equal(t, mono, c.At(0, c.CycleLast-1000), "below cycle_last: no motion")
	assert.Equal(t, mono+1000, c.At(0, c.CycleLast+1000), "mult 2^23: a counter of ns")
	boot := int64(c.Base[1].Sec*1e9 + c.Base[1].Nsec>>23)
	assert.Equal(t, boot+1000, c.At(1, c.CycleLast+1000))
	// Convert is Load and At in one.
	for _, cyc := range []uint64{c.CycleLast - 1000, c.CycleLast, c.CycleLast + 12345} {
		for i := range 2 {
			ns, seq, mode, ok := td.Convert(l, i, cyc)
			require.True(t, ok)
			assert.Equal(t, c.At(i, cyc), ns)
			assert.Equal(t, c.Seq, seq)
			assert.EqualValues(t, ModePvclock, mode)
		}
	}
	odd := append([]byte(nil), b...)
	binary.NativeEndian.PutUint32(odd, binary.NativeEndian.Uint32(odd)|1)
	_, _, _, ok = (*TimeData)(unsafe.Pointer(&odd[0])).Convert(l, 0, c.CycleLast)
	assert.False(t, ok, "while the kernel writes it")
	_, ok = (*TimeData)(unsafe.Pointer(&odd[0])).Load(l)
	assert.False(t, ok, "while the kernel writes it")

	c = Conv{CycleLast: 10, Mult: 3 << 30, Shift: 31, Base: [2]Timestamp{{Sec: 2, Nsec: 1 << 30}}}
	// (2^40 * 3*2^30 + 2^30) >> 31 = 3*2^39, exactly: the product needs 72 bits.
	assert.Equal(t, int64(2e9+3<<39), c.At(0, 10+1<<40))
	assert.Equal(t, int64(2e9+2), c.At(0, 11), "(3*2^30 + 2^30) >> 31")
	assert.Equal(t, int64(math.MaxInt64), c.At(0, math.MaxUint64), "saturates")
	c.Base[0].Sec = math.MaxInt64 / 1_000_000_000
	assert.Equal(t, int64(math.MaxInt64), c.At(0, 1<<40), "saturates")
}

func TestStampOfNilIsZero(t *testing.T) {
	var td *TimeData
	assert.Zero(t, td.Stamp())
}

// The stamp folds both the sequence count and the counter value: each
// changes it.
func TestStampFoldsSeqAndCounter(t *testing.T) {
	var td TimeData
	td.seq.Store(2)
	td.cycleLast.Store(100)
	s := td.Stamp()
	td.seq.Store(4)
	assert.NotEqual(t, s, td.Stamp(), "a new sequence count")
	td.seq.Store(2)
	assert.Equal(t, s, td.Stamp())
	td.cycleLast.Store(101)
	assert.NotEqual(t, s, td.Stamp(), "a new counter value")
}

func FuzzTimeData(f *testing.F) {
	b, sec, nsec := realTimeData(f)
	f.Add(b, sec, nsec)
	f.Add(b[:64], sec, nsec)
	f.Add(realTSCTimeData(f), uint64(0x50c), uint64(0x17eda8f2))
	f.Fuzz(func(t *testing.T, b []byte, sec, nsec uint64) {
		at, found := FindCoarse(b, sec, nsec)
		l, hasLayout := FindLayout(b, sec, nsec)
		if hasLayout {
			// A layout is a coarse pair with six bases before it,
			// twelve within b, past the head.
			require.True(t, found)
			require.Equal(t, at-6*16, l.Basetime())
			require.GreaterOrEqual(t, l.Basetime(), 32)
			require.LessOrEqual(t, l.Basetime()+12*16, len(b))
			require.NotZero(t, binary.NativeEndian.Uint32(b[l.multAt():]))
			require.LessOrEqual(t, binary.NativeEndian.Uint32(b[l.shiftAt():]), uint32(32))
			// The conversion loads within b and converts without a
			// panic.
			buf := make([]uint64, (len(b)+7)/8)
			copy(unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), len(b)), b)
			c, ok := (*TimeData)(unsafe.Pointer(&buf[0])).Load(l)
			require.True(t, ok)
			_ = c.At(0, c.CycleLast+sec)
			_ = c.At(1, c.CycleLast-nsec)
			// The raw base, where one is found, is a conversion too.
			if r, ok := timeDataOf(b).Raw(l); ok {
				require.NotZero(t, r.Mult)
				require.LessOrEqual(t, r.Shift, uint32(32))
				require.Equal(t, c.Seq, r.Seq)
				require.Equal(t, c.Mode, r.Mode)
				require.Equal(t, c.CycleLast, r.CycleLast)
				_ = r.At(r.CycleLast + sec)
			}
		}
		if !found {
			return
		}
		// What it accepts: an even count and the pair, aligned, past
		// the head.
		require.GreaterOrEqual(t, len(b), 32)
		require.Zero(t, binary.NativeEndian.Uint32(b)&1)
		first := -1
		for off := 16; off+16 <= len(b); off += 8 {
			if binary.NativeEndian.Uint64(b[off:]) == sec && binary.NativeEndian.Uint64(b[off+8:]) == nsec {
				first = off
				break
			}
		}
		require.Equal(t, at, first)
	})
}

// TestConvertUnderUpdates: Convert, racing a writer that publishes two
// conversions in turn as the kernel does (the count odd while it
// writes), returns one or the other's time, never a mix of their fields.
func TestConvertUnderUpdates(t *testing.T) {
	b, sec, nsec := realTimeData(t)
	l, ok := FindLayout(b, sec, nsec)
	require.True(t, ok)
	words := make([]uint64, TimeDataSize/8)
	td := (*TimeData)(unsafe.Pointer(&words[0]))
	convs := [2]Conv{
		{Mode: ModePvclock, CycleLast: 1000, Mult: 1 << 23, Shift: 23, Base: [2]Timestamp{{Sec: 5}, {Sec: 6}}},
		{Mode: ModeTSC, CycleLast: 2000, Mult: 2 << 23, Shift: 23, Base: [2]Timestamp{{Sec: 7}, {Sec: 8}}},
	}
	publish := func(c *Conv) {
		td.seq.Add(1)
		td.u32(4).Store(uint32(c.Mode))
		td.cycleLast.Store(c.CycleLast)
		td.u32(l.multAt()).Store(c.Mult)
		td.u32(l.shiftAt()).Store(c.Shift)
		td.u64(l.baseAt(baseMonotonic)).Store(c.Base[0].Sec)
		td.u64(l.baseAt(baseMonotonic) + 8).Store(c.Base[0].Nsec)
		td.seq.Add(1)
	}
	publish(&convs[0])
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			publish(&convs[i&1])
		}
	}()
	// 100,000 conversions (a few ms); the qualification layer (and the
	// mutants) converts for 200 ms.
	deadline, minReads := time.Time{}, 100_000
	if testenv.Qualifying() {
		deadline, minReads = time.Now().Add(200*time.Millisecond), 0
	}
	torn, read := 0, 0
	for n := 0; time.Now().Before(deadline) || n < minReads; n++ {
		ns, _, mode, ok := td.Convert(l, 0, 3000)
		if !ok {
			continue
		}
		read++
		if !(ns == convs[0].At(0, 3000) && mode == ModePvclock || ns == convs[1].At(0, 3000) && mode == ModeTSC) {
			torn++
		}
	}
	close(stop)
	<-done
	t.Logf("%d conversions read, %d torn", read, torn)
	assert.Zero(t, torn)
}

// realTSCTimeData is the vDSO time data captured on the development
// machine with the kernel on the TSC (testdata/README.md).
func realTSCTimeData(t testing.TB) []byte {
	realTimeData(t) // the byte-order check
	b, err := os.ReadFile("testdata/vdso-time-data-firecracker-6.18-tsc.bin")
	require.NoError(t, err)
	require.Len(t, b, TimeDataSize)
	return b
}

// timeDataOf is b in a TimeDataSize buffer of its own, aligned for the
// atomics.
func timeDataOf(b []byte) *TimeData {
	words := make([]uint64, TimeDataSize/8)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), TimeDataSize), b)
	return (*TimeData)(unsafe.Pointer(&words[0]))
}

// TestRawConv: the raw clock base (CS_RAW) is found after the first one
// in each layout the kernel has had, the 6.18 captures' (struct
// vdso_clock: right after base 0's basetime array), 6.10 to 6.12's
// (struct vdso_data: 16 bytes of tz_minuteswest, tz_dsttime,
// hrtimer_res and padding after it) and 5.6 to 6.9's (no max_cycles
// either), with the clocksource's own mult and shift and
// CLOCK_MONOTONIC_RAW's base; a place whose head does not repeat the
// first base's (another count, clock mode, cycle_last or mask), a count
// that is odd, a mult of 0 or a shift past 32 is none.
func TestRawConv(t *testing.T) {
	pv, sec, nsec := realTimeData(t)
	tsc := realTSCTimeData(t)
	// 6.10 to 6.12: the same struct, 16 bytes more after the bases.
	tz := func(b []byte) []byte {
		return append(append(append([]byte(nil), b[:232]...), make([]byte, 16)...), b[232:232+232]...)
	}
	// 5.6 to 6.9: without max_cycles too (8 bytes at 16 in each base).
	noMax := func(b []byte) []byte {
		base := func(b []byte) []byte { return append(append([]byte(nil), b[:16]...), b[24:232]...) }
		return append(append(base(b[:232]), make([]byte, 16)...), base(b[232:464])...)
	}
	for _, c := range []struct {
		name              string
		b                 []byte
		mode              int32
		mult, shift       uint32
		rawSec, rawNsec   uint64
		coarseSec, coarse uint64
	}{
		{"6.18 on kvm-clock", pv, ModePvclock, 0x800000, 23, 0x2c2b, 0x0012224e63000000, sec, nsec},
		{"6.18 on the TSC", tsc, ModeTSC, 6860646, 24, 0x50c, 0x00052bf818a39c84, 0x50c, 0x17eda8f2},
	} {
		for _, layout := range []struct {
			name string
			b    []byte
		}{{"6.13+", c.b}, {"6.10-6.12", tz(c.b)}, {"5.6-6.9", noMax(c.b)}} {
			what := c.name + ", " + layout.name
			l, ok := FindLayout(layout.b, c.coarseSec, c.coarse)
			require.True(t, ok, what)
			td := timeDataOf(layout.b)
			r, ok := td.Raw(l)
			require.True(t, ok, what)
			conv, ok := td.Load(l)
			require.True(t, ok, what)
			assert.Equal(t, RawConv{Seq: conv.Seq, Mode: c.mode, CycleLast: conv.CycleLast, Mult: c.mult, Shift: c.shift,
				Base: Timestamp{c.rawSec, c.rawNsec}}, r, what)
			assert.Equal(t, int64(c.rawSec*1e9+c.rawNsec>>c.shift), r.At(r.CycleLast), "%s: at cycle_last, the base", what)

			rawAt := 232
			if layout.name != "6.13+" {
				rawAt += 16
			}
			if layout.name == "5.6-6.9" {
				rawAt -= 8
			}
			for _, bad := range []struct {
				name string
				off  int
				put  func([]byte)
			}{
				{"another count", rawAt, func(b []byte) { binary.NativeEndian.PutUint32(b, binary.NativeEndian.Uint32(b)+2) }},
				{"another clock mode", rawAt + 4, func(b []byte) { binary.NativeEndian.PutUint32(b, 7) }},
				{"another cycle_last", rawAt + 8, func(b []byte) { binary.NativeEndian.PutUint64(b, binary.NativeEndian.Uint64(b)+1) }},
				{"another mask", rawAt + l.maskAt(), func(b []byte) { binary.NativeEndian.PutUint64(b, 1<<32-1) }},
				{"mult 0", rawAt + l.multAt(), func(b []byte) { binary.NativeEndian.PutUint32(b, 0) }},
				{"shift 33", rawAt + l.shiftAt(), func(b []byte) { binary.NativeEndian.PutUint32(b, 33) }},
				{"an odd count", 0, func(b []byte) {
					binary.NativeEndian.PutUint32(b, binary.NativeEndian.Uint32(b)|1)
					binary.NativeEndian.PutUint32(b[rawAt:], binary.NativeEndian.Uint32(b))
				}},
			} {
				b := append([]byte(nil), layout.b...)
				bad.put(b[bad.off:])
				_, ok := timeDataOf(b).Raw(l)
				assert.False(t, ok, "%s: %s", what, bad.name)
			}
		}
	}
	_, ok := timeDataOf(pv).Raw(Layout{})
	assert.False(t, ok, "no layout")
}
