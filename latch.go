package schedclock

import (
	"math"
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// The seqcount latch (include/linux/seqlock.h, "latch" variant), as used by
// the kernel's sched_clock since 2015.
//
// A classic seqcount makes readers spin while a write is in progress: a
// reader that runs while the writer is stopped half-way (preempted by the
// Go scheduler or the OS, stopped in a debugger, throttled by a cgroup)
// would spin until the writer comes back. The latch never makes a reader
// wait. It keeps two copies (banks) of the read data. seq is even while
// readers use bank 0 and odd while they use bank 1; the writer
//
//  1. rewrites bank 1 (readers are on bank 0, untouched),
//  2. increments seq: readers move to bank 1, which is complete,
//  3. rewrites bank 0 (readers are on bank 1, untouched),
//  4. increments seq: readers move back to bank 0.
//
// Whatever step the writer stops at, one bank is complete and seq points
// readers at it. A reader loads seq, reads the bank seq&1 names, reads the
// counter, and then loads seq again: if it changed, the bank may have been
// rewritten under it and it starts over. A retry happens only if the
// writer made progress, so a reader finishes in a bounded number of steps
// whenever the writer is stopped.
//
// The publication instant of new data is step 2. A reader that finishes
// with the old data loaded seq before step 2 and read its counter before
// it loaded seq the second time, so, given the ordering the counter read
// provides (Clock.Now's dependent re-check on amd64, readCNTVCT's LDAR on
// arm64, orderAfter's dependent load for the portable source, sequentially
// consistent atomics in fake counters), its counter value was taken
// before step 2 became visible. Every switch in this package is
// built on that fact (see Clock.switchLine).
//
// Every field a reader loads is a sync/atomic value: the race detector
// sees the protocol as it is, and on amd64 and arm64 an atomic load is a
// plain MOV or an LDAR.
//
// Layout: seq and bank 0 fit one 64-byte cache line, and that
// line is 64-byte aligned (the latch is the first field of a Clock, whose
// size is a multiple of 64 bytes and so lands on a 64-byte boundary in
// Go's size classes; TestLatchLayout checks both), so an ordinary read
// touches one line. Bank 1 fills the next line and is read only while an
// update is in flight. The line is shared with no writer-side state: the
// writer touches it only to publish.
type latch struct {
	seq   atomic.Uint64
	banks [2]bank
}

// bank is one copy of the read data (the kernel's clock_read_data),
// arranged so that the arithmetic after the counter read is as short as
// it can be: with base = frac - epochCyc*mult (mod 2^64),
//
//	ns = epochNs + (cyc*mult + base) >> shift
//
// equals epochNs + ((cyc-epochCyc)*mult + frac) >> shift exactly whenever
// cyc-epochCyc is at most fastMax, so the subtraction and the mask leave
// the dependency chain behind the counter read: only a multiply, two
// adds and a shift follow it. Everything else goes to slowNanos.
type bank struct {
	// read is the counter's read function, stored as the func value's
	// pointer so it can be loaded atomically (see funcPtr).
	read unsafe.Pointer
	// The clock read epochNs plus frac*2^-shift ns when the counter read
	// epochCyc (masked to the counter's width).
	epochCyc atomic.Uint64
	epochNs  atomic.Int64
	// fastMax is the largest cyc-epochCyc the fast path may convert,
	// computed without the mask: beyond it the delta is negative (counter
	// below epochCyc), has wrapped (a narrow counter), overflows 64 bits
	// when multiplied, or the counter set bits above its width.
	fastMax atomic.Uint64
	// base is frac - epochCyc*mult, modulo 2^64.
	base atomic.Uint64
	// scale packs mult, shift and the counter width; see packScale.
	scale atomic.Uint64
	// offset is epochNs - epochCyc where the line is a pure offset
	// (mult 1<<shift: a counter of nanoseconds, the paravirtual
	// page's), else 0. There the conversion is cyc + offset
	// for every cyc the fast path takes, and Clock.Now's inline page
	// read adds it to the page's nanoseconds in place of the multiply
	// and shift (now_amd64.s). A pure offset of 0 converts the long way.
	// It also makes bank 1 start a cache line of its own.
	offset atomic.Int64
}

// scale layout: mult in bits 63..32, shift in bits 15..8, the counter
// width in bits 7..0.
func packScale(mult, shift uint32, width uint64) uint64 {
	return uint64(mult)<<32 | uint64(shift)<<8 | width
}

func unpackScale(scale uint64) (mult, shift uint32, mask uint64) {
	return uint32(scale >> 32), uint32(scale>>8) & 0xff, maskOf(int(scale & 0xff))
}

// line is the writer's description of what a bank holds: the linear map
// from counter values to nanoseconds that readers evaluate.
type line struct {
	read     func() uint64
	conv     conversion
	epochCyc uint64
	epochNs  int64
	frac     uint64 // remainder in 2^-shift ns, always < 1<<shift
	frozen   bool   // a switch's freezer reads it (see freeze); not published to readers
	// epochTotal is the counter's value at epochCyc, unwrapped: its
	// value where the clock started on it (New, a switch to it, Resume),
	// plus every count since, as the folds counted them (lost wraps
	// included), carried on by every switch to the same counter (a new
	// rate, a re-anchoring). A narrow counter's values repeat every wrap;
	// its count does not, so the watch and calibration measure the
	// counter's progress through it (total). A 64-bit counter's count is
	// its value, unless it stepped back. Readers never need it: it is
	// not published.
	epochTotal uint64
}

// at evaluates the line at counter value cyc exactly as readers do, and
// also returns the sub-nanosecond remainder so that a new epoch can carry
// it (which is what makes Update exact).
func (ln *line) at(cyc uint64) (ns int64, frac uint64) {
	return ln.atDelta(clampDelta((cyc-ln.epochCyc)&ln.conv.mask, ln.conv.mask))
}

// total is ln's counter's value at cyc, unwrapped (see epochTotal):
// the count at the epoch plus the delta readers convert.
func (ln *line) total(cyc uint64) uint64 {
	return ln.epochTotal + clampDelta((cyc-ln.epochCyc)&ln.conv.mask, ln.conv.mask)
}

// atDelta evaluates the line delta counts past its epoch, remainder
// included, with no clamp: a fold that knows a delta in the negative zone
// for forward progress (see lateFold) evaluates it so.
func (ln *line) atDelta(delta uint64) (ns int64, frac uint64) {
	hi, lo := mulAdd(delta, ln.conv.mult, ln.frac)
	ns, saturated := addSaturating(ln.epochNs, hi, lo, ln.conv.shift)
	if saturated {
		return ns, 0
	}
	return ns, lo & (uint64(1)<<ln.conv.shift - 1)
}

// fastMax is the largest cyc-epochCyc readers may convert on the fast
// path: within the conversion's window, and short of the delta at which
// the clock would pass math.MaxInt64 (which only slowNanos saturates).
func (ln *line) fastMax() uint64 {
	// The last delta whose (delta*mult + frac) >> shift fits in room:
	// (room<<shift + 2^shift-1 - frac) / mult, in 128 bits.
	room := uint64(math.MaxInt64) - uint64(ln.epochNs)
	shift := ln.conv.shift
	hi, lo := room>>(63-shift)>>1, room<<shift
	lo, carry := bits.Add64(lo, uint64(1)<<shift-1-ln.frac, 0)
	hi += carry
	limit := ^uint64(0)
	if hi < uint64(ln.conv.mult) {
		limit, _ = bits.Div64(hi, lo, uint64(ln.conv.mult))
	}
	return min(ln.conv.window(), limit)
}

// addSaturating returns epochNs + (hi:lo >> shift), or math.MaxInt64 if
// the sum does not fit: no counter value, however far ahead, makes a
// clock wrap to negative time.
func addSaturating(epochNs int64, hi, lo uint64, shift uint32) (ns int64, saturated bool) {
	if shift < 64 && hi>>shift != 0 {
		return math.MaxInt64, true // the delta alone is 2^64 ns or more
	}
	delta := shiftRight128(hi, lo, shift)
	// room is MaxInt64 - epochNs, which fits a uint64 for any epochNs.
	if room := uint64(math.MaxInt64) - uint64(epochNs); delta > room {
		return math.MaxInt64, true
	}
	return int64(uint64(epochNs) + delta), false
}

// clampDelta reads a delta in the negative zone as 0.
func clampDelta(delta, mask uint64) uint64 {
	if delta >= negativeFrom(mask) {
		return 0
	}
	return delta
}

// mulAdd returns delta*mult + frac in 128 bits.
func mulAdd(delta uint64, mult uint32, frac uint64) (hi, lo uint64) {
	hi, lo = bits.Mul64(delta, uint64(mult))
	lo, carry := bits.Add64(lo, frac, 0)
	return hi + carry, lo
}

// store writes ln into b, field by field. Only the writer calls it, and
// only on the bank readers are not using.
func (b *bank) store(ln *line, step func(string)) {
	atomic.StorePointer(&b.read, funcPtr(ln.read))
	step("bank.read")
	b.epochCyc.Store(ln.epochCyc)
	step("bank.epochCyc")
	b.epochNs.Store(ln.epochNs)
	step("bank.epochNs")
	b.fastMax.Store(ln.fastMax())
	step("bank.fastMax")
	b.base.Store(ln.frac - ln.epochCyc*uint64(ln.conv.mult))
	step("bank.base")
	b.scale.Store(packScale(ln.conv.mult, ln.conv.shift, uint64(bitsOf(ln.conv.mask))))
	step("bank.scale")
	b.offset.Store(ln.pureOffset())
	step("bank.offset")
}

// pureOffset is epochNs - epochCyc if the line converts every counter
// value the fast path takes as cyc + that, else 0. That is when mult is
// 1<<shift: (delta<<shift + frac) >> shift is delta for any remainder
// frac, which is below 1<<shift.
func (ln *line) pureOffset() int64 {
	if uint64(ln.conv.mult) != uint64(1)<<ln.conv.shift {
		return 0
	}
	return ln.epochNs - int64(ln.epochCyc)
}

// publish makes ln the data readers use, in the latch's four steps.
// step is called after each store so tests can stop the writer there.
func (l *latch) publish(ln *line, step func(string)) {
	l.banks[1].store(ln, step)
	l.seq.Add(1) // readers move to bank 1: ln is now published
	step("seq.odd")
	l.banks[0].store(ln, step)
	l.seq.Add(1) // readers move back to bank 0
	step("seq.even")
}

// fastNanos converts cyc, a counter value read under this bank, on the
// fast path; ok is false where cyc is more than fastMax past the epoch,
// for slowNanos to convert. Both readers (Clock.now and otherNow) call it
// after their counter read, with the scale they loaded, so that the
// bank's loads stay out of the read's way; it is small enough to be
// inlined into each (go build -gcflags=-m says so).
func (b *bank) fastNanos(cyc, scale uint64) (ns int64, ok bool) {
	if cyc-b.epochCyc.Load() > b.fastMax.Load() {
		return 0, false
	}
	return b.epochNs.Load() + int64((cyc*(scale>>32)+b.base.Load())>>(scale>>8&63)), true
}

// slowNanos converts the counter values the fast path refuses: below the
// epoch (clamped to it), past a narrow counter's wrap (masked), with bits
// set above the counter's width (masked), so far past the epoch that
// delta*mult overflows 64 bits (the 128-bit path, for a refresher stalled
// past the overflow horizon or a clock that is no longer refreshed), and
// so far that the sum would pass math.MaxInt64 (saturated there).
//
//go:noinline
func (b *bank) slowNanos(cyc, scale uint64) int64 {
	mult, shift, mask := unpackScale(scale)
	epochCyc := b.epochCyc.Load()
	frac := b.base.Load() + epochCyc*uint64(mult)
	hi, lo := mulAdd(clampDelta((cyc-epochCyc)&mask, mask), mult, frac)
	ns, _ := addSaturating(b.epochNs.Load(), hi, lo, shift)
	return ns
}

// funcPtr and ptrFunc convert a func value to and from the pointer it is
// made of (a Go func value is a pointer to its closure), so that it can be
// stored and loaded atomically; sync/atomic.Value does the same with
// interfaces. The pointer also identifies the function: two reads of the
// same counter through the same func value compare equal.
func funcPtr(f func() uint64) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&f))
}

func ptrFunc(p unsafe.Pointer) func() uint64 {
	return *(*func() uint64)(unsafe.Pointer(&p))
}
