package schedclock

import (
	"encoding/binary"
	"math"
	"math/big"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/pvclock"
)

// fakeTimeData is a vDSO time data page in the 6.18 layout (basetime at
// 40), in memory a test writes: put publishes a conversion in it as the
// kernel does (seq odd, fields, seq even).
type fakeTimeData struct {
	words [pvclock.TimeDataSize / 8]uint64
	k     *kernelConvs
}

func newFakeTimeData(t *testing.T) *fakeTimeData {
	f := &fakeTimeData{}
	b := f.bytes()
	binary.NativeEndian.PutUint64(b[24:], ^uint64(0)) // mask
	binary.NativeEndian.PutUint32(b[32:], 1<<23)
	binary.NativeEndian.PutUint32(b[36:], 23)
	binary.NativeEndian.PutUint64(b[136:], 777) // CLOCK_MONOTONIC_COARSE
	binary.NativeEndian.PutUint64(b[144:], 12345)
	l, ok := pvclock.FindLayout(b, 777, 12345)
	require.True(t, ok)
	f.k = &kernelConvs{td: (*pvclock.TimeData)(unsafe.Pointer(&f.words[0])), layout: l}
	return f
}

func (f *fakeTimeData) bytes() []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&f.words[0])), len(f.words)*8)
}

func (f *fakeTimeData) put(c pvclock.Conv) {
	b := f.bytes()
	binary.NativeEndian.PutUint32(b[0:], c.Seq|1)
	binary.NativeEndian.PutUint32(b[4:], uint32(c.Mode))
	binary.NativeEndian.PutUint64(b[8:], c.CycleLast)
	binary.NativeEndian.PutUint32(b[32:], c.Mult)
	binary.NativeEndian.PutUint32(b[36:], c.Shift)
	for i, at := range []int{56, 152} {
		binary.NativeEndian.PutUint64(b[at:], c.Base[i].Sec)
		binary.NativeEndian.PutUint64(b[at+8:], c.Base[i].Nsec)
	}
	binary.NativeEndian.PutUint32(b[0:], c.Seq)
}

// kernelUpdate is the conversion the kernel publishes after prev when
// it reads the counter at now: whole ticks of interval accumulated into
// cycle_last, and mult changed by dmult with xtime_nsec corrected so
// that both agree at now (timekeeping_advance, timekeeping_apply_adjustment).
func kernelUpdate(prev pvclock.Conv, now, interval uint64, dmult int64) pvclock.Conv {
	ticks := (now - prev.CycleLast) / interval
	next := prev
	next.Seq += 2
	next.CycleLast += ticks * interval
	next.Mult = uint32(int64(prev.Mult) + dmult)
	rem := now - next.CycleLast
	for i := range next.Base {
		nsec := int64(prev.Base[i].Nsec+ticks*interval*uint64(prev.Mult)) - dmult*int64(rem)
		whole := int64(1e9) << prev.Shift
		if nsec < 0 { // timekeeping_adjust borrows a second
			nsec += whole
			next.Base[i].Sec--
		}
		next.Base[i].Sec += uint64(nsec / whole)
		next.Base[i].Nsec = uint64(nsec % whole)
	}
	return next
}

var firstConv = pvclock.Conv{Seq: 100, Mode: pvclock.ModePvclock, CycleLast: 5_000_000_000, Mult: 1<<23 + 2000, Shift: 23,
	Base: [2]pvclock.Timestamp{{Sec: 5, Nsec: 3 << 23}, {Sec: 9, Nsec: 3 << 23}}}

// TestKernelPivot: the pivot of an update is the counter value the
// kernel read for it, exactly, whichever way mult moved; where the
// conversions are not consecutive, or their arithmetic does not divide,
// it is cycle_last.
func TestKernelPivot(t *testing.T) {
	const interval = 4_000_000
	for _, dmult := range []int64{1, -1, 4194, -4194} {
		now := firstConv.CycleLast + interval + 987_654
		next := kernelUpdate(firstConv, now, interval, dmult)
		assert.Equal(t, now, kernelPivot(&firstConv, &next), "Δmult %+d", dmult)
		assert.Equal(t, next.At(0, now), firstConv.At(0, now), "both agree at the pivot")
		skipped := next
		skipped.Seq += 2
		assert.Equal(t, next.CycleLast, kernelPivot(&firstConv, &skipped), "not consecutive")
		off := next
		off.Base[0].Nsec++
		if dmult != 1 && dmult != -1 {
			assert.Equal(t, next.CycleLast, kernelPivot(&firstConv, &off), "does not divide")
		}
		// Divides, but puts the kernel's read outside the update's
		// span (after the next cycle_last's tick, or before its own).
		far := next
		far.Base[0].Nsec -= uint64(4194 * 2 * (next.CycleLast - firstConv.CycleLast))
		assert.Equal(t, next.CycleLast, kernelPivot(&firstConv, &far), "Δmult %+d: outside the span", dmult)
	}
	same := kernelUpdate(firstConv, firstConv.CycleLast+4_500_000, interval, 0)
	assert.Equal(t, same.CycleLast, kernelPivot(&firstConv, &same), "Δmult 0: the two agree from cycle_last on")

	// An update of the frequency alone (adjtimex: timekeeping_advance's
	// TK_ADV_FREQ, less than a tick after the last): no tick
	// accumulated, cycle_last as it was, mult and xtime_nsec changed
	// so that both agree at the counter value the kernel read.
	for _, dmult := range []int64{2, -2, 3400, -3400} {
		now := firstConv.CycleLast + 987_654
		freq := kernelUpdate(firstConv, now, interval, dmult)
		require.Equal(t, firstConv.CycleLast, freq.CycleLast)
		assert.Equal(t, now, kernelPivot(&firstConv, &freq), "a change of frequency alone, Δmult %+d", dmult)
		// But not one that puts the kernel's read more than a tick
		// (10 ms at HZ=100) past cycle_last.
		far := kernelUpdate(firstConv, firstConv.CycleLast+11_000_000, 12_000_000, dmult)
		require.Equal(t, firstConv.CycleLast, far.CycleLast)
		assert.Equal(t, far.CycleLast, kernelPivot(&firstConv, &far), "Δmult %+d: past a tick", dmult)
	}
}

// TestKernelConversionInForce: a reading maps through the conversion
// that was the kernel's when it was taken: the one before an update up
// to the update's pivot (past the new cycle_last), the new one from it;
// so both around an adjtimex-sized change of mult, where the two differ
// by microseconds.
func TestKernelConversionInForce(t *testing.T) {
	f := newFakeTimeData(t)
	const interval = 4_000_000
	q := firstConv
	f.put(q)
	mode := int32(pvclock.ModePvclock)
	kt, how := f.k.slowAt(0, q.CycleLast+10, mode)
	require.Equal(t, kernelExact, how)
	assert.Equal(t, q.At(0, q.CycleLast+10), kt)

	now := q.CycleLast + interval + 3_000_000
	n := kernelUpdate(q, now, interval, 4194)
	f.put(n)
	for _, cyc := range []uint64{n.CycleLast, n.CycleLast + 1_000_000, now - 1} {
		kt, how := f.k.slowAt(0, cyc, mode)
		require.Equal(t, kernelExact, how)
		assert.Equal(t, q.At(0, cyc), kt, "before the pivot: the old conversion")
		if now-cyc > 1000 {
			assert.NotEqual(t, n.At(0, cyc), kt, "the new one differs there")
		}
	}
	for _, cyc := range []uint64{now, now + 1_000_000} {
		kt, how := f.k.slowAt(0, cyc, mode)
		require.Equal(t, kernelExact, how)
		assert.Equal(t, n.At(0, cyc), kt, "from the pivot: the new conversion")
	}
	// CLOCK_BOOTTIME too.
	kt, how = f.k.slowAt(1, now+5, mode)
	require.Equal(t, kernelExact, how)
	assert.Equal(t, n.At(1, now+5), kt)

	// Another mode is not the kernel's counter.
	_, how = f.k.slowAt(0, now, pvclock.ModeTSC)
	assert.Equal(t, kernelNone, how)

	// A conversion older than the last recorded (a goroutine that read
	// it before the update and records it after) is not recorded.
	h := f.k.head.Load()
	f.k.record(&q)
	assert.Equal(t, h, f.k.head.Load())
	f.k.record(&n)
	assert.Equal(t, h, f.k.head.Load(), "nor one recorded already")
}

// TestKernelTimeModeMustMatch: a line on the pvclock page maps exactly
// only while the kernel's vDSO converts the pvclock page (clock mode 2),
// and while the shared Source reads the page, not its fall back.
func TestKernelTimeModeMustMatch(t *testing.T) {
	f := newFakeTimeData(t)
	q := firstConv
	f.put(q)
	c := newPvclockLineClock(t, f.k)
	reading := int64(q.CycleLast) + pvclockLineOffset + 1000
	_, how := c.exactKernelTime(f.k, 0, reading)
	require.Equal(t, kernelExact, how)
	_, how = c.exactKernelTime(f.k, 0, reading)
	require.Equal(t, kernelExact, how, "the fast path")
	tsc := q
	tsc.Seq += 2
	tsc.Mode = pvclock.ModeTSC
	tsc.CycleLast += 5000
	f.put(tsc)
	_, how = c.exactKernelTime(f.k, 0, reading)
	assert.Equal(t, kernelNone, how, "the kernel converts the TSC")
	_, how = f.k.slowAt(0, tsc.CycleLast+1, pvclock.ModeTSC) // a TSC line's call records it
	require.Equal(t, kernelExact, how)
	_, how = c.exactKernelTime(f.k, 0, int64(tsc.CycleLast)+pvclockLineOffset+1)
	assert.Equal(t, kernelNone, how, "the kernel converts the TSC, its conversion recorded")
	// A reading from before the kernel went to the TSC, mapped after:
	// the conversion in force then converted another counter.
	_, how = f.k.slowAt(0, q.CycleLast+1000, pvclock.ModeTSC)
	assert.Equal(t, kernelNone, how)
	f.put(q)
	(*f.k.pvclockSrc).state.Store(onFallback)
	_, how = c.exactKernelTime(f.k, 0, reading)
	assert.Equal(t, kernelNone, how, "the Source reads its fall back")

	// The fall back alone, on a clock whose kernel never left the page:
	// exact while the Source reads the page, none once it reads its
	// fall back (the steps above, the TSC's conversion among them, would
	// refuse the reading without the fall back's check).
	g := newFakeTimeData(t)
	g.put(q)
	d := newPvclockLineClock(t, g.k)
	_, how = d.exactKernelTime(g.k, 0, reading)
	require.Equal(t, kernelExact, how)
	(*g.k.pvclockSrc).state.Store(onFallback)
	_, how = d.exactKernelTime(g.k, 0, reading)
	assert.Equal(t, kernelNone, how, "the Source reads its fall back, the kernel the page")
}

// TestKernelTimeBoundsTheMapBeforeTheExactPath: a reading the exact path
// leaves to the paired map (before the line's epoch) maps no later than
// the exact path's start, however far ahead the map runs.
func TestKernelTimeBoundsTheMapBeforeTheExactPath(t *testing.T) {
	f := newFakeTimeData(t)
	q := firstConv
	f.put(q)
	c := newPvclockLineClock(t, f.k)
	saved := kernelConvsOn.Swap(f.k) // no other test maps meanwhile: none runs in parallel
	t.Cleanup(func() { kernelConvsOn.Store(saved) })
	c.st.kernel.tick = (*Clock).tickKernelMapsLocked
	c.st.kernel.on.Store(true)
	r := &c.st.kernel.maps[0]
	r.firstSeg[0] = wallSegment{at: 0, wall: 1 << 60} // far ahead
	r.first.segs = r.firstSeg[:]
	r.m.Store(&r.first)
	epoch := int64(q.CycleLast) + pvclockLineOffset
	kt, ok := c.KernelTime(KernelMonotonic, Instant(epoch-1))
	require.True(t, ok)
	assert.Equal(t, q.At(0, q.CycleLast), kt)
	kt, ok = c.KernelTime(KernelMonotonic, Instant(epoch+1))
	require.True(t, ok)
	assert.Equal(t, q.At(0, q.CycleLast+1), kt)
}

// TestKernelConversionsMissedAndOld: a reading whose conversion was
// missed (the process saw none in between) maps through the last one
// seen before it but never past where the next one seen starts; one
// older than every conversion kept is left to the paired map, bounded
// by where the oldest starts.
func TestKernelConversionsMissedAndOld(t *testing.T) {
	f := newFakeTimeData(t)
	const interval = 4_000_000
	mode := int32(pvclock.ModePvclock)
	q := firstConv
	f.put(q)
	f.k.slowAt(0, q.CycleLast, mode)
	missed := kernelUpdate(q, q.CycleLast+interval+100, interval, -4194)
	n := kernelUpdate(missed, missed.CycleLast+interval+100, interval, 0)
	n.Base[0].Nsec += 5000 << 23 // 5 µs ahead of q: q's time is past it only late
	f.put(n)
	f.k.slowAt(0, n.CycleLast+200, mode)
	cyc := n.CycleLast - 1
	kt, how := f.k.slowAt(0, cyc, mode)
	require.Equal(t, kernelExact, how)
	assert.Equal(t, min(q.At(0, cyc), n.At(0, n.CycleLast)), kt)
	late := n
	late.Base[0].Nsec -= 10000 << 23 // now q's time runs past n's start
	f2 := newFakeTimeData(t)
	f2.put(q)
	f2.k.slowAt(0, q.CycleLast, mode)
	f2.put(late)
	f2.k.slowAt(0, late.CycleLast, mode)
	kt, how = f2.k.slowAt(0, late.CycleLast-1, mode)
	require.Equal(t, kernelExact, how)
	assert.Equal(t, late.At(0, late.CycleLast), kt, "never past where the next conversion seen starts")
	assert.Less(t, kt, q.At(0, late.CycleLast-1))

	kt, how = f.k.slowAt(0, q.CycleLast-1, mode)
	assert.Equal(t, kernelBounded, how, "older than every conversion kept")
	assert.Equal(t, q.At(0, q.CycleLast), kt)

	// History wraps: the oldest go.
	cur := n
	for range kernelHistoryLen {
		cur = kernelUpdate(cur, cur.CycleLast+interval+100, interval, 1)
		f.put(cur)
		f.k.slowAt(0, cur.CycleLast+200, mode)
	}
	_, how = f.k.slowAt(0, n.CycleLast+200, mode)
	assert.Equal(t, kernelBounded, how, "n is no longer kept")
}

// TestKernelFastPathNeedsTheCurrentPivot: the common case answers only
// past the pivot of the current conversion, recorded: a reading from
// before an update, mapped after it, goes to slowAt (which picks the
// old conversion), and so does one whose conversion is not recorded.
func TestKernelFastPathNeedsTheCurrentPivot(t *testing.T) {
	f := newFakeTimeData(t)
	const interval = 4_000_000
	q := firstConv
	f.put(q)
	c := newPvclockLineClock(t, f.k)
	mode := int32(pvclock.ModePvclock)
	f.k.slowAt(0, q.CycleLast, mode)
	now := q.CycleLast + interval + 3_000_000
	n := kernelUpdate(q, now, interval, 4194)
	f.put(n)
	f.k.slowAt(0, now+1, mode) // recorded
	for _, cyc := range []uint64{now - 1_000_000, now, now + 1_000_000} {
		want, _ := f.k.slowAt(0, cyc, mode)
		got, how := c.exactKernelTime(f.k, 0, int64(cyc)+pvclockLineOffset)
		require.Equal(t, kernelExact, how)
		assert.Equal(t, want, got, "cyc %d", cyc)
	}
	// A conversion not recorded yet, whose pivot cycle_last would
	// misplace.
	next := kernelUpdate(n, now+interval+3_500_000, interval, -4194)
	f.put(next)
	cyc := next.CycleLast + 1000 // before its pivot: n's
	got, how := c.exactKernelTime(f.k, 0, int64(cyc)+pvclockLineOffset)
	require.Equal(t, kernelExact, how)
	assert.Equal(t, n.At(0, cyc), got)
	// Readings from before the line's epoch are bounded, not exact.
	_, how = c.exactKernelTime(f.k, 0, pvclockLineOffset+int64(q.CycleLast)-1)
	assert.Equal(t, kernelBounded, how)
	// So are readings from before the line's start, however recent:
	// they map no later than the start.
	since := int64(now) + pvclockLineOffset
	c.st.lines.since.Store(since)
	kt, how := c.exactKernelTime(f.k, 0, since-1000)
	assert.Equal(t, kernelBounded, how)
	assert.Equal(t, n.At(0, now), kt)
}

// pvclockLineOffset is newPvclockLineClock's reading less its counter.
const pvclockLineOffset = -4_000_000_000

// newPvclockLineClock is a Clock whose line reads the (fake) kernel
// counter of k as a pure offset from firstConv's cycle_last on: the
// pvclock page's line.
func newPvclockLineClock(t *testing.T, k *kernelConvs) *Clock {
	k.pvclockRead = funcPtr(func() uint64 { return 0 })
	k.tscRead = nil
	src := &paravirtSource{}
	k.pvclockSrc = &src
	c := &Clock{st: &clockState{}}
	ln := line{read: ptrFunc(k.pvclockRead), conv: conversion{mult: 1 << 23, shift: 23, mask: 1<<63 - 1},
		epochCyc: firstConv.CycleLast, epochNs: int64(firstConv.CycleLast) + pvclockLineOffset}
	c.st.cur = ln
	c.st.lines.since.Store(ln.epochNs)
	c.latch.publish(&c.st.cur, func(string) {})
	return c
}

// extendedAt is ln's reading d counts from its epoch, extended back
// before it for a negative d (floor((d*mult + frac) / 2^shift)).
func extendedAt(ln *line, d int64) int64 {
	num := new(big.Int).Mul(big.NewInt(d), big.NewInt(int64(ln.conv.mult)))
	num.Add(num, new(big.Int).SetUint64(ln.frac))
	den := new(big.Int).Lsh(big.NewInt(1), uint(ln.conv.shift))
	q := new(big.Int).Div(num, den) // Euclidean: floor for a positive divisor
	return ln.epochNs + q.Int64()
}

// TestInvertLine: the counter value invertLine finds reads the reading,
// and is the least that does, for lines of several rates; a pure
// offset's is the reading less the offset.
func TestInvertLine(t *testing.T) {
	for _, hz := range []uint64{1e9, 2_994_000_000, 24_000_000, 3_579_545} {
		conv, err := newConversion(Source{Name: "t", Read: func() uint64 { return 0 }, Bits: 64, Rate: hz})
		require.NoError(t, err)
		ln := line{conv: conv, epochCyc: 123_456_789, epochNs: 5e9, frac: uint64(1)<<conv.shift - 7}
		if uint64(conv.mult) == 1<<conv.shift {
			ln.frac = 0
		}
		var b bank
		b.store(&ln, func(string) {})
		for _, d := range []int64{0, 1, 2, 3, 1000, 999_999_937, 3 << 40, -1, -2, -1000, -99_999_999} {
			cyc := ln.epochCyc + uint64(d)
			ns := extendedAt(&ln, d)
			got, ok := invertLine(ns-ln.epochNs, ln.epochCyc, b.base.Load(), b.scale.Load())
			require.True(t, ok)
			back := extendedAt(&ln, int64(got-ln.epochCyc))
			assert.Equal(t, ns, back, "%d Hz, delta %d: the value found reads the reading", hz, d)
			assert.LessOrEqual(t, int64(got-cyc), int64(0), "%d Hz, delta %d", hz, d)
			before := extendedAt(&ln, int64(got-ln.epochCyc)-1)
			assert.Less(t, before, ns, "%d Hz, delta %d: the least such value", hz, d)
		}
	}
}

// TestLineSinceFollowsSwitches: a fold (the same counter and conversion,
// exactly continued) keeps the start of the readings the line inverts;
// a new counter, a new conversion or a step starts it again at the new
// line's epoch.
func TestLineSinceFollowsSwitches(t *testing.T) {
	read := func() uint64 { return 0 }
	other := func() uint64 { return 1 }
	conv, err := newConversion(Source{Name: "t", Read: read, Bits: 64, Rate: 2_994_000_000})
	require.NoError(t, err)
	c := &Clock{st: &clockState{writer: writerState{step: func(string) {}}}}
	first := line{read: read, conv: conv, epochCyc: 1000, epochNs: 5e9, frac: 12345}
	c.publishLocked(first)
	assert.Equal(t, first.epochNs, c.st.lines.since.Load())

	fold := first
	fold.epochCyc = 1000 + 7_777_777
	fold.epochNs, fold.frac = first.at(fold.epochCyc)
	c.publishLocked(fold)
	assert.Equal(t, first.epochNs, c.st.lines.since.Load(), "a fold continues the line")

	for _, next := range []line{
		{read: other, conv: fold.conv, epochCyc: fold.epochCyc + 10, epochNs: fold.epochNs + 3},
		{read: read, conv: conversion{mult: conv.mult + 1, shift: conv.shift, mask: conv.mask}, epochCyc: fold.epochCyc + 10, epochNs: fold.epochNs + 3},
		{read: read, conv: conv, epochCyc: fold.epochCyc + 10, epochNs: fold.epochNs + 1000, frac: fold.frac},
	} {
		c.publishLocked(fold)
		c.st.lines.since.Store(first.epochNs)
		c.publishLocked(next)
		assert.Equal(t, next.epochNs, c.st.lines.since.Load())
	}
}

// newTSCTimeData is fake time data whose conversion (returned) converts
// the TSC (vDSO clock mode 1), and a line that reads the TSC through a
// conversion of its own (2.994 GHz), 1,000,000 counts before that
// conversion's cycle_last.
func newTSCTimeData(t *testing.T) (*fakeTimeData, pvclock.Conv, line) {
	f := newFakeTimeData(t)
	tsc := pvclock.Conv{Seq: 100, Mode: pvclock.ModeTSC, CycleLast: 9_000_000_000, Mult: 5_603_000, Shift: 24,
		Base: [2]pvclock.Timestamp{{Sec: 3, Nsec: 1 << 23}, {Sec: 4, Nsec: 1 << 23}}}
	f.put(tsc)
	f.k.pvclockRead = nil
	f.k.tscRead = funcPtr(func() uint64 { return 0 })
	conv, err := newConversion(Source{Name: "t", Read: ptrFunc(f.k.tscRead), Bits: 64, Rate: 2_994_000_000})
	require.NoError(t, err)
	return f, tsc, line{read: ptrFunc(f.k.tscRead), conv: conv, epochCyc: tsc.CycleLast - 1_000_000, epochNs: 7e9, frac: 12345}
}

// TestKernelTimeOnATSCLine: a line that reads the TSC (a conversion of
// its own, 2.994 GHz) on a kernel whose vDSO converts the TSC (clock
// mode 1) maps a reading to the kernel's time at the counter value it
// was taken at, to within the ns the reading rounded.
func TestKernelTimeOnATSCLine(t *testing.T) {
	f, tsc, tscLine := newTSCTimeData(t)
	c := &Clock{st: &clockState{writer: writerState{step: func(string) {}}}}
	c.publishLocked(tscLine)
	for _, cyc := range []uint64{tsc.CycleLast + 3, tsc.CycleLast + 4, tsc.CycleLast + 5, tsc.CycleLast + 12_345_678} {
		reading, _ := c.st.cur.at(cyc)
		kt, how := c.exactKernelTime(f.k, 0, reading)
		require.Equal(t, kernelExact, how)
		want := tsc.At(0, cyc)
		assert.LessOrEqual(t, want-kt, int64(1), "cyc %d", cyc)
		assert.LessOrEqual(t, kt, want, "cyc %d: the least counter value that reads the reading", cyc)
	}
}

// onPortableLine returns a Clock whose line reads the portable source,
// 1000 ns at counter value 0: a reading is its CLOCK_MONOTONIC value plus
// 1000.
func onPortableLine() *Clock {
	c := &Clock{st: &clockState{}}
	c.st.cur = line{read: readMono, conv: conversion{mult: 1 << 23, shift: 23, mask: 1<<63 - 1}, epochCyc: 0, epochNs: 1000}
	c.st.lines.since.Store(c.st.cur.epochNs)
	c.latch.publish(&c.st.cur, func(string) {})
	return c
}

// TestKernelTimeOfAPortableReadingAfterTheNextUpdate: on the portable
// line, a CLOCK_BOOTTIME mapping under the kernel's current conversion
// records it, so that a reading taken under it and mapped after the
// kernel's next update (its goroutine preempted between the two) is
// still mapped exactly, through it, not by the paired map: the bounded
// answer could place it after a later reading's exact one (TestKernelTime
// IsMonotonicAcrossGoroutines saw 3 to 14 such inversions in some 13M
// handoffs beside two CPU-bound processes, on the pure-Go build, whose
// default clock stays on the portable source).
func TestKernelTimeOfAPortableReadingAfterTheNextUpdate(t *testing.T) {
	f := newFakeTimeData(t)
	f.k.portableRead = portableReadPtr
	q := firstConv
	q.Base[0].Sec = 10
	q.Base[1].Sec = q.Base[0].Sec + 4
	f.put(q) // nothing recorded: no TSC or page line mapped anything
	c := onPortableLine()
	qMono, qOffset := q.At(0, q.CycleLast), q.At(1, q.CycleLast)-q.At(0, q.CycleLast)
	early := qMono + 1000 + 5 // 5 ns after q's start
	kt, how := c.exactKernelTime(f.k, 1, early)
	require.Equal(t, kernelExact, how)
	assert.Equal(t, qMono+5+qOffset, kt)

	// The kernel's next update (4 ms later, the same boot offset), and a
	// reading taken under q mapped only now.
	r := q
	r.Seq += 2
	r.CycleLast += 4e6
	r.Base[0].Nsec += 4e6 << r.Shift
	r.Base[1].Nsec += 4e6 << r.Shift
	f.put(r)
	late := qMono + 1000 + 3e6 // 3 ms after q's start: before r's
	kt, how = c.exactKernelTime(f.k, 1, late)
	require.Equal(t, kernelExact, how, "a reading under the conversion before the current one, recorded when it was current")
	assert.Equal(t, qMono+3e6+qOffset, kt)
}

// TestKernelTimeOnThePortableLine: a line on the portable source maps a
// reading to CLOCK_MONOTONIC, its counter, and to
// CLOCK_BOOTTIME with the boot offset of the conversion in force:
// across a resume (a conversion whose boot offset grew), a reading from
// before it keeps the old offset, where the conversions between were
// seen; and is bounded where a resume may have been missed.
func TestKernelTimeOnThePortableLine(t *testing.T) {
	f := newFakeTimeData(t)
	f.k.portableRead = portableReadPtr
	q := firstConv
	q.Base[0].Sec = 10 // CLOCK_MONOTONIC at 10 s
	q.Base[1].Sec = q.Base[0].Sec + 4
	f.put(q)
	f.k.slowAt(0, q.CycleLast, pvclock.ModePvclock) // recorded
	c := onPortableLine()
	qMono, qOffset := q.At(0, q.CycleLast), q.At(1, q.CycleLast)-q.At(0, q.CycleLast)
	reading := qMono + 1000 + 5 // 5 ns after q's start
	kt, how := c.exactKernelTime(f.k, 0, reading)
	require.Equal(t, kernelExact, how)
	assert.Equal(t, qMono+5, kt)
	kt, how = c.exactKernelTime(f.k, 1, reading)
	require.Equal(t, kernelExact, how)
	assert.Equal(t, qMono+5+qOffset, kt)

	// A resume: CLOCK_MONOTONIC goes on from where it stopped, the boot
	// offset grows by the time asleep.
	// Suspended 1 s after q's start, for an hour.
	r := q
	r.Seq += 2
	r.CycleLast += 1e9 + 3600e9
	r.Base[0].Sec++
	r.Base[1].Sec += 1 + 3600
	f.put(r)
	f.k.slowAt(0, r.CycleLast, pvclock.ModePvclock)
	kt, how = c.exactKernelTime(f.k, 1, reading)
	require.Equal(t, kernelExact, how, "from before the resume: the offset then")
	assert.Equal(t, qMono+5+qOffset, kt)
	kt, how = c.exactKernelTime(f.k, 1, reading+1e9+10)
	require.Equal(t, kernelExact, how)
	assert.Equal(t, qMono+1e9+15+qOffset+3600e9, kt, "after it: the new offset")

	// The resume missed (sequence counts 4 apart, another offset): a
	// reading before the last conversion seen is bounded by its start.
	g := newFakeTimeData(t)
	g.k.portableRead = portableReadPtr
	g.put(q)
	g.k.slowAt(0, q.CycleLast, pvclock.ModePvclock)
	r.Seq += 2
	g.put(r)
	g.k.slowAt(0, r.CycleLast, pvclock.ModePvclock)
	kt, how = c.exactKernelTime(g.k, 1, reading)
	assert.Equal(t, kernelBounded, how)
	assert.Equal(t, r.At(1, r.CycleLast), kt)
}

// TestKernelTimeOfThePastLine: readings taken on a line the clock has
// left (a switch to another line of a counter the kernel converts) map
// through that line, as exactly as before the switch; readings older
// than it are bounded by the new line's start. Where either line reads a
// counter the kernel does not convert, readings on both sides of the
// switch are left to the paired map (bounded before the new line where
// it is the kernel's), so that a later reading never maps earlier. The
// default clock's first-use read is the portable source's counter.
func TestKernelTimeOfThePastLine(t *testing.T) {
	f, tsc, first := newTSCTimeData(t)
	c := &Clock{st: &clockState{writer: writerState{step: func(string) {}}}}
	c.publishLocked(first)
	cyc := tsc.CycleLast + 12_345_678
	reading, _ := first.at(cyc)
	before, how := c.exactKernelTime(f.k, 0, reading)
	require.Equal(t, kernelExact, how)

	// A new rate of the same counter: a line that does not continue it.
	next := first
	next.conv.mult++
	next.epochCyc, next.epochNs, next.frac = cyc+1000, reading+1000, 0
	c.publishLocked(next)
	kt, how := c.exactKernelTime(f.k, 0, reading)
	assert.Equal(t, kernelExact, how, "a reading of the line left")
	assert.Equal(t, before, kt)
	start, _ := c.exactKernelTime(f.k, 0, next.epochNs)
	kt, how = c.exactKernelTime(f.k, 0, first.epochNs-1)
	assert.Equal(t, kernelBounded, how, "older than the line left")
	assert.Equal(t, start, kt, "older than the line left: at most the new line's start")

	// Another rate again: a reading of the first line is now two lines
	// back, which the clock does not keep: bounded, not mapped through
	// the line between.
	third := next
	third.conv.mult++
	third.epochCyc, third.epochNs = cyc+3000, reading+3000
	c.publishLocked(third)
	start, _ = c.exactKernelTime(f.k, 0, third.epochNs)
	kt, how = c.exactKernelTime(f.k, 0, reading)
	assert.Equal(t, kernelBounded, how, "two lines back")
	assert.Equal(t, start, kt, "two lines back: at most the newest line's start")
	next = third

	// A switch to a counter the kernel does not convert: both sides to
	// the paired map.
	other := func() uint64 { return 0 }
	c.publishLocked(line{read: other, conv: first.conv, epochCyc: 5, epochNs: next.epochNs + 1e6})
	_, how = c.exactKernelTime(f.k, 0, next.epochNs+10)
	assert.Equal(t, kernelNone, how, "a reading of the line left, the new one not the kernel's")

	// And back: the line left is not the kernel's, its readings bounded.
	back := next
	back.epochCyc, back.epochNs = cyc+5000, next.epochNs+2e6
	c.publishLocked(back)
	start, _ = c.exactKernelTime(f.k, 0, back.epochNs)
	kt, how = c.exactKernelTime(f.k, 0, next.epochNs+1e6+10)
	assert.Equal(t, kernelBounded, how, "a reading of a line the kernel does not convert")
	assert.Equal(t, start, kt)

	// The default clock's first-use read reads the portable source.
	c.st.policy = &trustPolicy{first: firstUse{read: other}}
	assert.Equal(t, int32(kernelModeMonotonic), c.kernelMode(f.k, funcPtr(other)))
	assert.Equal(t, int32(0), c.kernelMode(f.k, funcPtr(func() uint64 { return 1 })))
}

// TestKernelTimeStartsTheSetUp: a default clock's first use that is a
// KernelTime starts its set-up at once, and answers once the set-up's
// switch to the hardware's counter (which stands Now still for
// microseconds) is done: the switch is then behind the events a program
// traces, not among them.
func TestKernelTimeStartsTheSetUp(t *testing.T) {
	c, _ := slowProbeDefaultClock()
	defer c.Close()
	require.False(t, c.st.policy.started(), "set-up before the first use")
	c.KernelTime(KernelMonotonic, 0)
	assert.True(t, c.st.policy.started(), "KernelTime started no set-up")
	assert.Equal(t, "hw", c.Info().Source, "the first use, a KernelTime, answered before the switch")
}

// slowProbeDefaultClock is a default clock whose only descriptor's probe
// takes 5 ms (file reads on a loaded machine) to give hw, a 1 GHz
// counter that runs with Go's monotonic clock.
func slowProbeDefaultClock() (*Clock, Source) {
	hw := realtime1GHz()
	hw.Rate = 1e9
	return newDefaultClock([]*descriptor{{Arch: runtime.GOARCH,
		Probe: func() (Source, rateOrigin, float64, error) {
			time.Sleep(5 * time.Millisecond)
			return hw, rateCPUID, 0, nil
		},
		NoVerdict: "no verdict: a test's counter",
	}}), hw
}

// putRaw writes the raw clock base (CS_RAW) after the first one, as the
// kernel does in the same update: the first base's head (count, clock
// mode, cycle_last, mask) and the raw clock's mult, shift and
// CLOCK_MONOTONIC_RAW base.
func (f *fakeTimeData) putRaw(r pvclock.RawConv) {
	b := f.bytes()
	const at = 232 // 6.18: basetime 40 + 12 bases of 16
	copy(b[at:at+32], b[0:32])
	binary.NativeEndian.PutUint32(b[at+32:], r.Mult)
	binary.NativeEndian.PutUint32(b[at+36:], r.Shift)
	binary.NativeEndian.PutUint64(b[at+40+4*16:], r.Base.Sec)
	binary.NativeEndian.PutUint64(b[at+40+4*16+8:], r.Base.Nsec)
}

// TestKernelConversionIsChecked: the kernel's raw conversion is taken
// only for the counter of the clock mode the kernel's vDSO runs in, and
// only where it puts a counter value read between two reads of the raw
// clock between them; then its mult and shift are the clock's
// conversion, and the rate they make its rate.
func TestKernelConversionIsChecked(t *testing.T) {
	f, tsc, _ := newTSCTimeData(t)
	raw := pvclock.RawConv{Mode: pvclock.ModeTSC, CycleLast: tsc.CycleLast, Mult: 6860646, Shift: 24, Base: pvclock.Timestamp{Sec: 1038, Nsec: 5 << 24}}
	f.putRaw(raw)
	cyc := tsc.CycleLast + 123_456_789
	read := func() uint64 { return cyc }
	at := raw.At(cyc)
	kc, err := kernelConversionOf(f.k.td, f.k.layout, pvclock.ModeTSC, read, func() int64 { return at })
	require.NoError(t, err)
	assert.Equal(t, conversion{mult: 6860646, shift: 24, mask: ^uint64(0)}, kc.conv)
	assert.InDelta(t, 2445428025.291, kc.hz, 0.001, "1e9·2^24/6860646 Hz")

	_, err = kernelConversionOf(f.k.td, f.k.layout, pvclock.ModePvclock, read, func() int64 { return at })
	assert.ErrorContains(t, err, "converts clock mode 1, not 2")
	for _, off := range []int64{-5000, 2, 5000} {
		_, err = kernelConversionOf(f.k.td, f.k.layout, pvclock.ModeTSC, read, func() int64 { return at + off })
		assert.ErrorContains(t, err, "put a reading", "the raw clock %d ns off", off)
	}
	g, _, _ := newTSCTimeData(t) // no raw base
	_, err = kernelConversionOf(g.k.td, g.k.layout, pvclock.ModeTSC, read, func() int64 { return at })
	assert.ErrorContains(t, err, "no raw clock base")
}

// TestTheFirstKernelTimeAnswersAfterTheSwitch: a default clock's first
// KernelTime makes its hardware choice, and the switch to the counter
// (which stands Now still while it runs), before it answers: a program
// that maps its readings from its very first one finds every later
// reading on the counter's line, never in the switch's stand-still.
func TestTheFirstKernelTimeAnswersAfterTheSwitch(t *testing.T) {
	c, hw := slowProbeDefaultClock()
	defer c.Close()
	first := c.Now() // starts the set-up, whose probe takes a while
	_, ok := c.KernelTime(KernelMonotonic, first)
	require.True(t, ok)
	assert.Equal(t, "hw", c.Info().Source, "the first KernelTime answered before the switch")
	seq := c.latch.seq.Load()
	assert.Equal(t, funcPtr(hw.Read), atomic.LoadPointer(&c.latch.banks[seq&1].read), "the next reading is not on the counter's line")
	assert.Greater(t, c.Now(), first)
}

// TestKernelTimeDuringASwitch: a reading taken on a switch's freezer
// (the line the switch froze, read through its stand-in, which returns
// the pinned value), mapped while the switch runs, maps as a reading of
// the line it froze: exactly, as it maps once the switch is over, not
// through the paired map (whose answer can lie below an exact answer
// already given for an earlier reading).
func TestKernelTimeDuringASwitch(t *testing.T) {
	f, tsc, tscLine := newTSCTimeData(t)
	c := &Clock{st: &clockState{writer: writerState{step: func(string) {}}}}
	c.publishLocked(tscLine)
	counter := tsc.CycleLast + 5_000_000
	tscLine.read = func() uint64 { return counter }
	c.st.cur.read, c.st.lines.live.read = tscLine.read, tscLine.read
	f.k.tscRead = funcPtr(tscLine.read)
	c.latch.publish(&c.st.cur, func(string) {})
	before, _ := c.st.cur.at(counter - 1000)
	want, how := c.exactKernelTime(f.k, 0, before)
	require.Equal(t, kernelExact, how)

	_, pinned, _ := c.freeze("switch") // the freezer published and pinned
	kt, how := c.exactKernelTime(f.k, 0, pinned)
	assert.Equal(t, kernelExact, how, "a reading of the freezer")
	assert.Equal(t, tsc.At(0, counter), kt, "the pin's instant")
	kt, how = c.exactKernelTime(f.k, 0, before)
	assert.Equal(t, kernelExact, how, "an earlier reading, mapped during the switch")
	assert.Equal(t, want, kt)
}

// TestKernelTimeAcrossTheKernelsClocksources: the kernel switches its
// clocksource from the TSC to kvm-clock and back (by hand, as root may
// at any time), while the clock reads the TSC, or the pvclock page: the
// kernel's vDSO then converts the other counter, and a reading still
// maps exactly, through the page's scale between the TSC and the page's
// time. Each conversion is in force from the counter value the kernel
// read at the switch (its cycle_last, in its own counter's units), so a
// reading taken before a switch and mapped after it maps as it did
// before, and a later reading never maps earlier. Without the page there
// is no conversion between the two: the paired map answers.
func TestKernelTimeAcrossTheKernelsClocksources(t *testing.T) {
	page := pvclock.Pvclock{TSCTimestamp: 9_000_000_000, SystemTime: 6_000_000_000, Mul: 3512649351, Shift: -1, Flags: pvclock.TSCStableBit}
	var pg pvclock.Page
	pg.Publish(page)
	f, tsc, tscLine := newTSCTimeData(t)
	f.k.page = func() *pvclock.Page { return &pg }
	c := &Clock{st: &clockState{writer: writerState{step: func(string) {}}}}
	c.publishLocked(tscLine)
	at := func(cyc uint64) int64 { r, _ := c.st.cur.at(cyc); return r }
	mapped := func(what string, cyc uint64, want int64) int64 {
		t.Helper()
		for i := range 2 {
			kt, how := c.exactKernelTime(f.k, i, at(cyc))
			require.Equal(t, kernelExact, how, "%s (clock %d)", what, i)
			// The least count that reads the reading: within a ns.
			assert.InDelta(t, want+int64(i)*1e9, kt, 1.5, "%s (clock %d)", what, i)
		}
		kt, _ := c.exactKernelTime(f.k, 0, at(cyc))
		return kt
	}
	r1 := tsc.CycleLast + 1_000_000
	k1 := mapped("on the TSC, the kernel on it", r1, tsc.At(0, r1))

	// To kvm-clock: the kernel reads the page at TSC value sw, and
	// CLOCK_MONOTONIC goes on from where the TSC's conversion had it.
	sw := tsc.CycleLast + 4_000_000
	kvm := pvclock.Conv{Seq: tsc.Seq + 2, Mode: pvclock.ModePvclock, CycleLast: page.Time(sw), Mult: 1 << 23, Shift: 23}
	for i := range kvm.Base {
		ns := uint64(tsc.At(i, sw))
		kvm.Base[i] = pvclock.Timestamp{Sec: ns / 1e9, Nsec: ns % 1e9 << 23}
	}
	f.put(kvm)
	mapped("a reading from before the switch, mapped after it", r1, tsc.At(0, r1))
	r2 := sw + 2_000_000
	k2 := mapped("on the TSC, the kernel on kvm-clock", r2, kvm.At(0, page.Time(r2)))
	mapped("just before the switch", sw-1, tsc.At(0, sw-1))

	// And back to the TSC.
	sw2 := sw + 7_000_000
	back := pvclock.Conv{Seq: kvm.Seq + 2, Mode: pvclock.ModeTSC, CycleLast: sw2, Mult: tsc.Mult, Shift: tsc.Shift}
	for i := range back.Base {
		ns := uint64(kvm.At(i, page.Time(sw2)))
		back.Base[i] = pvclock.Timestamp{Sec: ns / 1e9, Nsec: ns % 1e9 << back.Shift}
	}
	f.put(back)
	mapped("on kvm-clock, mapped back on the TSC", r2, kvm.At(0, page.Time(r2)))
	r3 := sw2 + 1000
	k3 := mapped("on the TSC again", r3, back.At(0, r3))
	assert.Less(t, k1, k2)
	assert.Less(t, k2, k3)

	// The clock on the pvclock page, the kernel on the TSC: a reading
	// of the page's time maps through the TSC it was read at.
	pc := newPvclockLineClock(t, f.k)
	f.k.page = func() *pvclock.Page { return &pg }
	pv := page.Time(r3 + 5000)
	kt, how := pc.exactKernelTime(f.k, 0, int64(pv)+pvclockLineOffset)
	require.Equal(t, kernelExact, how, "a reading of the page, the kernel on the TSC")
	assert.InDelta(t, back.At(0, page.TSCAt(pv)), kt, 1.5)

	// No page: no conversion between the two.
	f.k.page = nil
	_, how = c.exactKernelTime(f.k, 0, at(r2))
	assert.Equal(t, kernelNone, how, "without the page")
}

// TestKernelMapBoundCoversAChangeOfFrequency: the bound Info states for
// the paired map onto a kernel clock, before the kernel's frequency
// changes (adjtimex: from -500 to +500 ppm at most), covers every
// reading the map maps before its next pairing re-aims it: the map
// keeps the old pace until then, for up to a period and a segment's
// lead. A re-mapping of an older reading may change by that much.
func TestKernelMapBoundCoversAChangeOfFrequency(t *testing.T) {
	c, err := New(Portable())
	require.NoError(t, err)
	defer c.Close()
	var changeAt, ppm atomic.Int64
	changeAt.Store(math.MaxInt64)
	refAt := func(n int64) int64 {
		if at := changeAt.Load(); n > at {
			return n + 12345 + (n-at)*ppm.Load()/1e6
		}
		return n + 12345
	}
	r := &c.st.kernel.maps[0]
	r.ref, r.monotone = refClock{read: func() int64 { return refAt(c.nanos()) }, quick: func() int64 { return refAt(c.nanos()) }}, true
	c.startMap(r)
	c.st.mu.Lock()
	for range 3 {
		c.tickLocked(r, time.Now())
		time.Sleep(time.Millisecond)
	}
	bound := r.kernelBound()
	c.st.mu.Unlock()
	for _, change := range []int64{1000, -1000} {
		at := c.nanos()
		changeAt.Store(at)
		ppm.Store(change)
		m := r.m.Load()
		for _, d := range []time.Duration{time.Millisecond, wallPeriod, wallPeriod + wallLead} {
			reading := at + int64(d)
			off := time.Duration(abs(m.wallAt(reading) - refAt(reading)))
			assert.LessOrEqual(t, off, bound, "%+d ppm, a reading %v after the change, mapped before the next pairing", change, d)
		}
	}
	// A map read no more is aimed at the idle pace (every 3 s at most):
	// its readings map through a segment that old.
	r.slow = true
	assert.GreaterOrEqual(t, r.kernelBound(), (wallIdlePeriod*3/2+wallLead)/1_000_000*kernelFreqChange, "idle")
}

// TestKernelTimeOfAReadingASecondOld: a reading mapped a second after it
// was taken, 250 kernel updates later (HZ=250), each seen by a mapping,
// maps through the conversion in force when it was taken, as it did at
// once: a goroutine preempted between its reading and its mapping (a
// switch of the kernel's clocksource stops every CPU: 316 ms here) maps
// as one that was not.
func TestKernelTimeOfAReadingASecondOld(t *testing.T) {
	f := newFakeTimeData(t)
	const interval = 4_000_000
	mode := int32(pvclock.ModePvclock)
	q := firstConv
	f.put(q)
	cyc := q.CycleLast + 1_234_567
	at, how := f.k.slowAt(0, cyc, mode)
	require.Equal(t, kernelExact, how)
	cur := q
	for i := range 250 {
		cur = kernelUpdate(cur, cur.CycleLast+interval+100, interval, int64(i%3)-1)
		f.put(cur)
		f.k.slowAt(0, cur.CycleLast+200, mode)
	}
	later, how := f.k.slowAt(0, cyc, mode)
	assert.Equal(t, kernelExact, how, "a reading a second old")
	assert.Equal(t, at, later)
}

// linearAt is slowAt's answer found the plain way, for the test below:
// every conversion kept, newest first, until the reading is past one's
// pivot.
func linearAt(k *kernelConvs, i int, cyc uint64, mode int32) (int64, kernelMapping) {
	var scale pageScale
	h := k.head.Load()
	var newer kernelRecord
	n := 0
	for j := h; j > 0 && j+kernelHistoryLen > h; j-- {
		r, ok := k.slots[(j-1)%kernelHistoryLen].load(j)
		if !ok {
			break
		}
		u, ok := k.inMode(cyc, mode, r.conv.Mode, &scale)
		if !ok {
			return 0, kernelNone
		}
		if u >= r.pivot {
			return k.through(i, &r, u, &newer, n > 0), kernelExact
		}
		newer, n = r, n+1
	}
	if n == 0 {
		return 0, kernelNone
	}
	return newer.conv.At(i, newer.pivot), kernelBounded
}

// TestKernelHistoryBisection: slowAt, which walks the newest conversions
// kept one by one and bisects the rest, answers as a walk of them all:
// across a full history with conversions missed (no mapping during
// their tick), some of them moving the time past where the next seen
// starts, for readings in every conversion's span and older than all.
func TestKernelHistoryBisection(t *testing.T) {
	f := newFakeTimeData(t)
	const interval = 4_000_000
	mode := int32(pvclock.ModePvclock)
	cur := firstConv
	f.put(cur)
	f.k.slowAt(0, cur.CycleLast, mode)
	starts := []uint64{cur.CycleLast}
	for n := range kernelHistoryLen + 40 {
		cur = kernelUpdate(cur, cur.CycleLast+interval+uint64(n*1000), interval, int64(n%5)-2)
		if n%37 == 0 && cur.Base[0].Nsec >= 3000<<23 {
			// A missed update moved it 3 µs back: the conversion before
			// it runs past where the next one seen starts.
			cur.Base[0].Nsec -= 3000 << 23
		}
		f.put(cur)
		if n%37 != 0 { // missed: no mapping during its tick
			f.k.slowAt(0, cur.CycleLast+200, mode)
		}
		starts = append(starts, cur.CycleLast)
	}
	for x, s := range starts {
		for _, cyc := range []uint64{s - 1, s, s + 1, s + interval/2, s + interval - 1} {
			for i := range 2 {
				want, wantHow := linearAt(f.k, i, cyc, mode)
				got, how := f.k.slowAt(i, cyc, mode)
				require.Equal(t, wantHow, how, "conversion %d, cyc %d, clock %d", x, cyc, i)
				require.Equal(t, want, got, "conversion %d, cyc %d, clock %d", x, cyc, i)
			}
		}
	}
}
