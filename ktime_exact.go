package schedclock

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/schedclock/schedclock/internal/format"
	"github.com/schedclock/schedclock/internal/hwcounter"
	"github.com/schedclock/schedclock/internal/pvclock"
)

// The exact path of KernelTime. Where a Clock's current line reads the
// very counter the kernel's vDSO converts (the pvclock page on a
// kvm-clock guest, the TSC on a TSC kernel), a reading is that counter
// value through the line: KernelTime inverts the line and converts the
// counter value with the kernel's own conversion, read from the vDSO's
// time data as clock_gettime reads it (lib/vdso's do_hres). (The
// portable source's counter is CLOCK_MONOTONIC itself: monotonicAt.)
//
//	ns = basetime.sec*1e9 + ((cyc - cycle_last)*mult + basetime.nsec) >> shift
//
// The kernel rewrites that conversion at every timekeeping update (each
// tick of a ticking CPU: 4 ms at HZ=250), and a reading taken before an
// update was converted by the vDSO with the conversion of its time: so
// the process keeps the last kernelHistoryLen conversions it has seen,
// and maps a reading with the one that was in force when it was taken.
//
// Which one that was is not cycle_last's to say: an update accumulates
// whole ticks into cycle_last, which stays behind the counter value the
// kernel read for it (by up to a tick), and the conversion before it
// went on serving readers until it was replaced. What says it is the
// arithmetic of the update (timekeeping_advance and
// timekeeping_apply_adjustment): the new conversion agrees with the old
// one exactly at the counter value the kernel read ("now"), and differs
// from it by (mult - old mult)·(cyc - now) in 2^-shift ns anywhere else:
//
//	T_new(cyc) - T_old(cyc) = Δmult·(cyc - now)
//
// (T the conversion's time in 2^-shift ns before the shift), so now, the
// pivot from which the new conversion is the kernel's, is
// cycle_last + (T_old - T_new)(cycle_last)/Δmult, an exact division
// (TestKernelConversionPivotLive checks it on the live kernel, where NTP
// moves mult; TestKernelPivot on the kernel's arithmetic). Where Δmult
// is 0 both conversions agree everywhere from cycle_last on. A
// conversion whose predecessor the process did not see (no KernelTime
// during its tick), or whose arithmetic does not divide, pivots at its
// cycle_last: off then, before the true pivot, by Δmult·(now - cyc) >>
// shift (a fraction of a ns for NTP's ±1; up to Δmult's share of the
// remainder after an adjtimex change of frequency).
//
// What is not exact: a reading taken between the kernel's read of the
// counter and the publication of the update it made (microseconds;
// there the kernel's clock was still the old conversion) maps through
// the new one: off by Δmult·(cyc - now) >> shift, below a nanosecond but
// after a change of frequency. A reading older than every conversion
// kept maps through the paired map, never later than the oldest
// conversion's start (so the map stays monotonic), and so does a
// reading from before the clock's line reached this counter
// (lines.since: a fold or a re-anchor without a step continues the line,
// whose inverse then reaches back before its epoch; a switch starts it
// again).

// kernelHistoryLen is how many of the kernel's conversions the process
// keeps: readings mapped within that many kernel updates of being taken
// (a second at HZ=250, longer where the CPUs idle) are exact, given a
// KernelTime in each of the updates between. A goroutine preempted
// between its reading and its mapping (a switch of the kernel's
// clocksource stops every CPU: readers here were held 316 ms) maps
// exactly all the same. Each kept conversion is 72 bytes, allocated at
// the first KernelTime.
const kernelHistoryLen = 256

// kernelConvs is the process's view of the kernel's conversion: where
// the vDSO's time data is, the kernel counters' read functions as a
// bank holds them, and the conversions seen.
type kernelConvs struct {
	td     *pvclock.TimeData
	layout pvclock.Layout
	// pvclockRead and tscRead are readPvclock and readTSC as a bank's
	// read field holds them (nil where the build has no TSC reader);
	// pvclockSrc is the Source state readPvclock reads through
	// (&pvclockShared.src; a test's own).
	pvclockRead, tscRead unsafe.Pointer
	pvclockSrc           **paravirtSource
	// portableRead is readMono as a bank holds it: the portable
	// source's counter is CLOCK_MONOTONIC itself (runtime.nanotime),
	// which needs no conversion at all.
	portableRead unsafe.Pointer
	// page is the pvclock page, whose scale converts between the TSC and
	// the page's time where the clock reads one and the kernel's vDSO
	// converts the other (the kernel's clocksource switched at run time);
	// nil where there is none (kernelPageNow's nil: not found yet).
	page func() *pvclock.Page
	// head counts the conversions recorded; record n (from 1) is in
	// slots[(n-1)%kernelHistoryLen] while that slot's gen is n.
	head  atomic.Uint64
	mu    sync.Mutex // serialises record
	slots [kernelHistoryLen]kernelSlot
}

// kernelSlot is one recorded conversion: gen is its record number while
// it holds it, 0 while it is rewritten (a seqcount of its own, whose
// values never come back).
type kernelSlot struct {
	gen       atomic.Uint64
	seqMode   atomic.Uint64 // seq<<32 | uint32(mode)
	cycleLast atomic.Uint64
	multShift atomic.Uint64 // mult<<32 | shift
	pivot     atomic.Uint64
	base      [2][2]atomic.Uint64 // CLOCK_MONOTONIC, CLOCK_BOOTTIME: sec, nsec
}

// kernelRecord is a conversion and the counter value from which it was
// the kernel's.
type kernelRecord struct {
	conv  pvclock.Conv
	pivot uint64
}

func (s *kernelSlot) store(r *kernelRecord) {
	s.seqMode.Store(uint64(r.conv.Seq)<<32 | uint64(uint32(r.conv.Mode)))
	s.cycleLast.Store(r.conv.CycleLast)
	s.multShift.Store(uint64(r.conv.Mult)<<32 | uint64(r.conv.Shift))
	s.pivot.Store(r.pivot)
	for i := range s.base {
		s.base[i][0].Store(r.conv.Base[i].Sec)
		s.base[i][1].Store(r.conv.Base[i].Nsec)
	}
}

// load reads record gen from the slot; ok is false where the slot holds
// another (overwritten, or being written).
func (s *kernelSlot) load(gen uint64) (r kernelRecord, ok bool) {
	if s.gen.Load() != gen {
		return r, false
	}
	sm, ms := s.seqMode.Load(), s.multShift.Load()
	r.conv.Seq, r.conv.Mode = uint32(sm>>32), int32(uint32(sm))
	r.conv.Mult, r.conv.Shift = uint32(ms>>32), uint32(ms)
	r.conv.CycleLast = s.cycleLast.Load()
	r.pivot = s.pivot.Load()
	for i := range s.base {
		r.conv.Base[i] = pvclock.Timestamp{Sec: s.base[i][0].Load(), Nsec: s.base[i][1].Load()}
	}
	return r, s.gen.Load() == gen
}

// kernelConvsOn is kernelConvsOnce's value once the first KernelTime
// made it (nil before, and where there is none): KernelTime's exact
// path loads it. A package variable, not a Clock's field, so that the
// types behind it link only into programs that call KernelTime.
var kernelConvsOn atomic.Pointer[kernelConvs]

// kernelConvsOnce is the process's kernelConvs, nil where the vDSO's
// time data or its conversion's layout was not found; made at the first
// KernelTime (useKernelMaps), so that nothing links it into a program
// that does not call KernelTime.
var kernelConvsOnce = lazy[*kernelConvs]{make: func() *kernelConvs {
	k := kernelTicks.get()
	if k.td == nil || !kernelClocksHere() {
		return nil
	}
	layout, ok := k.td.Layout(k.coarse)
	if !ok {
		return nil
	}
	kc := &kernelConvs{td: k.td, layout: layout, pvclockRead: funcPtr(readPvclock), pvclockSrc: &pvclockShared.src,
		portableRead: portableReadPtr, page: kernelPageNow}
	if r := hwcounter.TSC(); r != nil {
		kc.tscRead = funcPtr(r)
		// Found now, before a switch of the kernel's clocksource needs
		// it: a mapping that waited for a probe while the kernel ran on
		// the other counter went to the paired map (8,665 readings
		// outside their brackets in 20 s of switches every 200 ms).
		kernelPageNow()
	}
	return kc
}}

// modeOf is the vDSO clock mode of the counter a bank's read function
// reads, 0 for none the kernel converts: the pvclock page while the
// shared Source reads it (not its fall back), the TSC; and
// kernelModeMonotonic for the portable source.
func (k *kernelConvs) modeOf(read unsafe.Pointer) int32 {
	switch {
	case read == nil:
		return 0
	case read == k.pvclockRead:
		if s := *k.pvclockSrc; s != nil && s.state.Load() != onFallback {
			return pvclock.ModePvclock
		}
	case read == k.tscRead:
		return pvclock.ModeTSC
	case read == k.portableRead:
		return kernelModeMonotonic
	}
	return 0
}

// kernelMode is modeOf for a read function of c's lines, the default
// clock's first-use read (the portable source's counter) included, and
// the last switch's freezer, whose readings are the frozen line's.
func (c *Clock) kernelMode(k *kernelConvs, read unsafe.Pointer) int32 {
	mode := k.modeOf(read)
	if mode != 0 {
		return mode
	}
	if c.st.policy != nil && read == funcPtr(c.st.policy.first.read) {
		return kernelModeMonotonic
	}
	if f := c.st.lines.frozen.Load(); f != nil && read == f.stand && f.of != read {
		return c.kernelMode(k, f.of)
	}
	return 0
}

// kernelModeMonotonic is modeOf's mode for the portable source: its
// counter values are CLOCK_MONOTONIC's.
const kernelModeMonotonic = -1

// kernelLoadTries bounds the tries at the time data while the kernel
// writes it (the vDSO spins there, for as long as it takes; a writer
// preempted half-way would hold a reader here): past that many, the
// conversions recorded answer. An update's write takes a few tries.
const kernelLoadTries = 1 << 14

// kernelMapping is what the exact path made of a reading.
type kernelMapping int

const (
	kernelNone    kernelMapping = iota // not the kernel's counter: the paired map answers
	kernelExact                        // the kernel's conversion answered
	kernelBounded                      // the paired map answers, at most the value given
)

// slowAt is clock i's (0 CLOCK_MONOTONIC, 1 CLOCK_BOOTTIME) time at
// value cyc of the counter of vDSO clock mode mode, past exactKernelTime's
// common case: the current conversion not recorded yet (recorded here),
// or cyc before its pivot (a reading from before the kernel's last
// update), or the time data not read (have false: the kernel kept
// writing it).
//
//go:noinline
func (k *kernelConvs) slowAt(i int, cyc uint64, mode int32) (int64, kernelMapping) {
	var cur pvclock.Conv
	have := false
	for range kernelLoadTries {
		if cur, have = k.td.Load(k.layout); have {
			break
		}
	}
	if have {
		k.record(&cur)
	}
	it := historyIter{k: k, h: k.head.Load(), cur: cur, have: have}
	it.j = it.h
	var scale pageScale
	var newer kernelRecord
	n := 0
	// The newest few one by one (a reading a few updates old, the common
	// case of this path), then the rest by bisection: the conversions
	// start one after the other, so a reading is at or past the start of
	// each one older than the conversion it was taken under, and before
	// the start of each newer one.
	for n < kernelLinearSteps || it.j == 0 {
		r, ok := it.next()
		if !ok {
			break
		}
		u, ok := k.inMode(cyc, mode, r.conv.Mode, &scale)
		if !ok {
			return 0, kernelNone // a counter the clock's cannot be put in
		}
		if u >= r.pivot {
			return k.through(i, &r, u, &newer, n > 0), kernelExact
		}
		newer = r
		n++
	}
	if it.j > 0 && it.j+kernelHistoryLen > it.h {
		lo, hi := it.h-kernelHistoryLen+1, it.j // the records left, oldest to newest
		if it.h < kernelHistoryLen {
			lo = 1
		}
		top := hi
		var best, oldest kernelRecord
		var bestJ, oldestJ, bestU uint64
		for lo <= hi {
			mid := lo + (hi-lo)/2
			r, ok := k.slots[(mid-1)%kernelHistoryLen].load(mid)
			if !ok {
				lo = mid + 1 // overwritten meanwhile: so are the older ones
				continue
			}
			if oldestJ == 0 || mid < oldestJ {
				oldest, oldestJ = r, mid
			}
			u, ok := k.inMode(cyc, mode, r.conv.Mode, &scale)
			if !ok {
				return 0, kernelNone
			}
			if u >= r.pivot {
				best, bestJ, bestU, lo = r, mid, u, mid+1
			} else {
				hi = mid - 1
			}
		}
		if bestJ != 0 {
			// The one recorded after it (whose start the reading is
			// before): the newest walked one by one, or the next record.
			if bestJ < top {
				if r, ok := k.slots[bestJ%kernelHistoryLen].load(bestJ + 1); ok {
					if _, ok := k.inMode(cyc, mode, r.conv.Mode, &scale); !ok {
						return 0, kernelNone
					}
					newer = r
				}
			}
			return k.through(i, &best, bestU, &newer, n > 0 || bestJ < top), kernelExact
		}
		if oldestJ != 0 {
			newer, n = oldest, n+1
		}
	}
	if n == 0 {
		return 0, kernelNone
	}
	// Older than every conversion kept: the paired map, bounded by
	// where the oldest one starts.
	return newer.conv.At(i, newer.pivot), kernelBounded
}

// kernelLinearSteps is how many of the newest conversions slowAt tries
// one by one before it bisects the rest.
const kernelLinearSteps = 8

// through is clock i's time at u through conversion r, u being past its
// pivot, newer the conversion recorded after it (haveNewer: there is
// one): r's time, but never past where newer starts where conversions
// between the two were missed, so that the map stays monotonic.
func (k *kernelConvs) through(i int, r *kernelRecord, u uint64, newer *kernelRecord, haveNewer bool) int64 {
	v := r.conv.At(i, u)
	if haveNewer && newer.conv.Seq != r.conv.Seq+2 {
		v = min(v, newer.conv.At(i, newer.pivot))
	}
	return v
}

// historyIter walks the conversions kept, newest first, from record h
// down (j is the next to load): the current conversion cur first where
// it is not recorded (another goroutine holds the lock: have says it was
// read), pivoted on the newest recorded, or at its cycle_last where none
// is; it ends at a record overwritten meanwhile (the older ones are too).
type historyIter struct {
	k          *kernelConvs
	j, h       uint64
	cur        pvclock.Conv
	have, done bool // done: cur was offered, or passed over
}

func (it *historyIter) next() (kernelRecord, bool) {
	if it.j > 0 && it.j+kernelHistoryLen > it.h {
		r, ok := it.k.slots[(it.j-1)%kernelHistoryLen].load(it.j)
		if ok {
			if !it.done {
				it.done = true
				if it.have && int32(it.cur.Seq-r.conv.Seq) > 0 {
					return kernelRecord{conv: it.cur, pivot: kernelPivot(&r.conv, &it.cur)}, true
				}
			}
			it.j--
			return r, true
		}
		it.j = 0
	}
	if !it.done {
		it.done = true
		if it.have {
			return kernelRecord{conv: it.cur, pivot: it.cur.CycleLast}, true
		}
	}
	return kernelRecord{}, false
}

// The kernel's clocksource can be switched at run time (by hand, as root
// may at any moment; its watchdog demotes the TSC): the vDSO then
// converts another counter than the clock's line reads. On a KVM guest
// both are the TSC, one scaled by the pvclock page: the page's time is
// a function of the TSC (pvclock.Pvclock.Time), and the TSC at a page
// time its inverse (TSCAt), so a reading maps exactly whichever of the
// two the kernel converts, through the page's scale as it is when the
// reading is mapped (the host rewrites it on a migration or a clock
// update: a reading older than such a rewrite is off by what the
// rewrite moved, a few ns on a stable host). Each conversion is the
// kernel's from its pivot in its own counter's units; across a switch
// of clocksource that is the new conversion's cycle_last, the new
// counter's value the kernel read at the switch (change_clocksource:
// timekeeping_forward_now with the old clocksource, then cycle_last
// read from the new one), so readings before and after a switch map
// through the conversion in force when each was taken, and a later
// reading never maps earlier. Where there is no page (bare metal: a
// switch to hpet or acpi_pm, which the vDSO cannot read at all), the
// paired map answers.

// pageScale is the pvclock page's scale as inMode loaded it, once per
// mapping: ok false where there is no page, or its scale is not time.
type pageScale struct {
	p              pvclock.Pvclock
	loaded, usable bool
}

// pageLoadTries bounds the tries at the page while the host writes it.
const pageLoadTries = 64

// inMode is cyc, a value of the counter of vDSO clock mode from, as a
// value of the counter of mode to: itself for the same counter; the
// page's time at a TSC value, or the TSC at a page time, through the
// page's scale (loaded into s at the first need); ok false for any
// other pair, and where the page cannot be read.
func (k *kernelConvs) inMode(cyc uint64, from, to int32, s *pageScale) (uint64, bool) {
	if from == to {
		return cyc, true
	}
	if !(from == pvclock.ModeTSC && to == pvclock.ModePvclock || from == pvclock.ModePvclock && to == pvclock.ModeTSC) {
		return 0, false
	}
	if !s.loaded {
		s.loaded = true
		if k.page != nil {
			if pg := k.page(); pg != nil {
				for range pageLoadTries {
					if p, ok := pg.Snapshot(); ok {
						s.p, s.usable = p, p.Stable() && p.Scalable()
						break
					}
				}
			}
		}
	}
	switch {
	case !s.usable:
		return 0, false
	case from == pvclock.ModeTSC:
		return s.p.Time(cyc), true
	}
	return s.p.TSCAt(cyc), true
}

// kernelPage is the pvclock page as KernelTime found it (kernelPageNow).
var kernelPage struct {
	page atomic.Pointer[pvclock.Page]
	mu   sync.Mutex
	next int64 // the runtime's clock before which a failed probe is not tried again
}

// kernelPageRetry is how long after a failed probe of the page
// kernelPageNow tries again: the kernel maps the page only once its vDSO
// has run in pvclock mode, which a switch of clocksource can start.
const kernelPageRetry = time.Second

// kernelPageNow is the pvclock page, probed (through a copy, never a
// load: see pvclock.ProbePvclock) with the first KernelTime's time data,
// and again, where it was not found, when a mapping needs it, at most
// every kernelPageRetry; nil where there is none.
func kernelPageNow() *pvclock.Page {
	if pg := kernelPage.page.Load(); pg != nil {
		return pg
	}
	if !pvclock.Supported {
		return nil
	}
	kernelPage.mu.Lock() // another mapping's probe: tens of µs, once
	defer kernelPage.mu.Unlock()
	if pg := kernelPage.page.Load(); pg != nil {
		return pg
	}
	now := runtimeNano()
	if now < kernelPage.next {
		return nil
	}
	kernelPage.next = now + int64(kernelPageRetry)
	maps, err := pvclock.Maps()
	if err != nil {
		return nil
	}
	loc, err := pvclock.Locate(maps, pvclock.KernelRelease())
	if err != nil {
		return nil
	}
	pg, _, err := pvclock.ProbePvclock(loc.Pvclock)
	if err != nil {
		return nil
	}
	kernelPage.page.Store(pg)
	return pg
}

// record appends cur to the conversions kept, with its pivot, unless it
// is there already or older than the last one, or another goroutine is
// recording.
func (k *kernelConvs) record(cur *pvclock.Conv) {
	if !k.mu.TryLock() {
		return
	}
	defer k.mu.Unlock()
	h := k.head.Load()
	r := kernelRecord{conv: *cur, pivot: cur.CycleLast}
	if h != 0 {
		last, _ := k.slots[(h-1)%kernelHistoryLen].load(h) // the lock holds writers off
		if last.conv.Seq == cur.Seq || int32(cur.Seq-last.conv.Seq) < 0 {
			return
		}
		r.pivot = kernelPivot(&last.conv, cur)
	}
	s := &k.slots[h%kernelHistoryLen]
	s.gen.Store(0)
	s.store(&r)
	s.gen.Store(h + 1)
	k.head.Store(h + 1)
}

// kernelPivot is the counter value from which next is the kernel's
// conversion, prev being the one before it: the counter value the
// kernel read for the update (see above), where prev is next's direct
// predecessor (its sequence count 2 before) and the arithmetic says so
// exactly; next's cycle_last otherwise. An update of the frequency
// alone (adjtimex: timekeeping_advance with TK_ADV_FREQ, less than a
// tick after the last) accumulates no tick: its cycle_last is its
// predecessor's, and the kernel's read at most a tick (kernelTickMax)
// after it.
func kernelPivot(prev, next *pvclock.Conv) uint64 {
	span := next.CycleLast - prev.CycleLast
	// A second at most either way: timekeeping_adjust borrows one where
	// its correction takes xtime_nsec below 0.
	secs := next.Base[0].Sec - prev.Base[0].Sec
	if prev.Seq+2 != next.Seq || prev.Mode != next.Mode || prev.Shift != next.Shift ||
		next.Shift > 32 || next.CycleLast < prev.CycleLast || int64(secs) > 1 || int64(secs) < -1 {
		return next.CycleLast
	}
	// (T_next - T_prev)(cycle_last) in 2^-shift ns, modulo 2^64: the
	// true value is small (Δmult times less than a tick), so it reads
	// right as an int64 however the terms wrap.
	diff := int64(secs*1e9<<next.Shift + next.Base[0].Nsec - prev.Base[0].Nsec - span*uint64(prev.Mult))
	dmult := int64(next.Mult) - int64(prev.Mult)
	if dmult == 0 || diff%dmult != 0 {
		return next.CycleLast
	}
	rem := -diff / dmult
	if rem < 0 || span > 0 && uint64(rem) >= span ||
		span == 0 && (&pvclock.Conv{Mult: prev.Mult, Shift: prev.Shift}).At(0, uint64(rem)) > int64(kernelTickMax) {
		return next.CycleLast
	}
	return next.CycleLast + uint64(rem)
}

// lineView is a line as exactKernelTime inverts it: its bank's values.
type lineView struct {
	read            unsafe.Pointer
	epochCyc, base  uint64
	scale           uint64
	epochNs, offset int64
}

// pastLine is a line readers have left: the readings from since up to
// the next line's start were taken on it (a switch's anchor is never
// below what the old line's readers returned).
type pastLine struct {
	lineView
	since int64
}

// past is ln as a pastLine for the readings from since on.
func (ln *line) past(since int64) *pastLine {
	return &pastLine{since: since, lineView: lineView{read: funcPtr(ln.read), epochCyc: ln.epochCyc,
		base: ln.frac - ln.epochCyc*uint64(ln.conv.mult), scale: packScale(ln.conv.mult, ln.conv.shift, uint64(bitsOf(ln.conv.mask))),
		epochNs: ln.epochNs, offset: ln.pureOffset()}}
}

// invertLine is the least counter value at which a bank (epochCyc,
// base, scale), extended back before its epoch where delta is negative,
// reads delta ns past its epoch: the value the reading was taken at, to
// within the counts of one ns. A pure offset's (mult 2^shift, the
// pvclock page's) is exact. ok is false past what 128 bits divide.
//
//go:noinline
func invertLine(delta int64, epochCyc, base, scale uint64) (uint64, bool) {
	mult, shift, mask := unpackScale(scale)
	if uint64(mult) == 1<<shift {
		return (epochCyc + uint64(delta)) & mask, true
	}
	// The least d with (d*mult + frac) >> shift >= delta, d of either
	// sign (an arithmetic shift: floor): with x = delta<<shift - frac,
	// d = ceil(x/mult) for x > 0 and -floor(-x/mult) otherwise.
	frac := base + epochCyc*uint64(mult)
	var hi, lo uint64
	negative := delta < 0
	if negative {
		back := uint64(-delta)
		hi, lo = back>>(63-shift)>>1, back<<shift
		var carry uint64
		lo, carry = bits.Add64(lo, frac, 0)
		hi += carry
	} else {
		hi, lo = uint64(delta)>>(63-shift)>>1, uint64(delta)<<shift
		var borrow uint64
		lo, borrow = bits.Sub64(lo, frac, 0)
		hi, borrow = bits.Sub64(hi, 0, borrow)
		if borrow != 0 {
			// Within frac of the epoch: -x = frac - delta<<shift, below
			// 2^shift.
			hi, lo, negative = 0, frac-uint64(delta)<<shift, true
		}
	}
	if hi >= uint64(mult) {
		return 0, false
	}
	d, r := bits.Div64(hi, lo, uint64(mult))
	if negative {
		return (epochCyc - d) & mask, true
	}
	if r != 0 {
		d++
	}
	return (epochCyc + d) & mask, true
}

// exactKernelTime is the exact path of KernelTime for clock i: the
// kernel's own conversion of the counter value the reading ns was taken
// at, where the clock's line reads a counter the kernel converts. The
// common case (the line's counter, a reading past the pivot of the
// kernel's current conversion) is this one function and Convert: every
// call is a few ns of a budget of half a Now.
func (c *Clock) exactKernelTime(k *kernelConvs, i int, ns int64) (int64, kernelMapping) {
	// The line, read as readers read it.
	var ln lineView
	var since int64
	for {
		seq := c.latch.seq.Load()
		b := &c.latch.banks[seq&1]
		ln.read = atomic.LoadPointer(&b.read)
		since, ln.offset = c.st.lines.since.Load(), b.offset.Load()
		if ln.offset == 0 {
			ln.epochCyc, ln.epochNs = b.epochCyc.Load(), b.epochNs.Load()
			ln.base, ln.scale = b.base.Load(), b.scale.Load()
		}
		if c.latch.seq.Load() == seq {
			break
		}
	}
	if ns >= since {
		return c.lineKernelTime(k, i, &ln, ns, false)
	}
	// From before the line. Taken on the one before it, where both lines
	// read counters the kernel converts: through that line, exactly.
	// (publishLocked stores lines.past before lines.since: a past line newer
	// than since starts at since or later, and ns is below that.) Where
	// one of them does not, the paired map answers for readings on either
	// side of the switch alike.
	if p := c.st.lines.past.Load(); p != nil && ns >= p.since && c.kernelMode(k, ln.read) != 0 {
		if kt, how := c.lineKernelTime(k, i, &p.lineView, ns, false); how == kernelExact {
			return kt, how
		}
	}
	// Older, or not exact: the paired map's, at most the time at the
	// line's start.
	return c.lineKernelTime(k, i, &ln, since, true)
}

// lineKernelTime is exactKernelTime's answer for a reading ns taken on
// line ln: the kernel's own conversion of the counter value at which ln
// reads ns, where ln reads a counter the kernel converts. before says ns
// is ln's start standing for an older reading: the answer is then a
// bound.
func (c *Clock) lineKernelTime(k *kernelConvs, i int, ln *lineView, ns int64, before bool) (int64, kernelMapping) {
	mode := c.kernelMode(k, ln.read)
	if mode == 0 {
		return 0, kernelNone
	}
	var cyc uint64
	if ln.offset != 0 {
		// A pure offset (the pvclock page's line): the counter value is
		// the reading less the offset, within the counter's width
		// (fastMax keeps its readings below it).
		cyc = uint64(ns - ln.offset)
	} else {
		var ok bool
		if cyc, ok = invertLine(ns-ln.epochNs, ln.epochCyc, ln.base, ln.scale); !ok {
			return 0, kernelNone
		}
	}
	if mode == kernelModeMonotonic {
		return k.monotonicAt(i, int64(cyc), before)
	}
	if !before {
		kt, seq, kmode, ok := k.td.Convert(k.layout, i, cyc)
		if ok && kmode == mode {
			if h := k.head.Load(); h != 0 {
				s := &k.slots[(h-1)%kernelHistoryLen]
				if s.gen.Load() == h && uint32(s.seqMode.Load()>>32) == seq {
					pivot := s.pivot.Load()
					if s.gen.Load() == h && cyc >= pivot {
						return kt, kernelExact
					}
				}
			}
		}
	}
	kt, how := k.slowAt(i, cyc, mode)
	if before && how == kernelExact {
		return kt, kernelBounded // at most the time at the line's start
	}
	return kt, how
}

// monotonicAt is clock i's time at the instant CLOCK_MONOTONIC read
// mono (the portable source's reading): mono itself, and for
// CLOCK_BOOTTIME mono plus the time spent suspended as the conversion of
// that instant says (it changes only at a resume). before says the
// reading is from before the clock's line: bounded, then.
func (k *kernelConvs) monotonicAt(i int, mono int64, before bool) (int64, kernelMapping) {
	how := kernelExact
	if before {
		how = kernelBounded
	}
	if i == 0 {
		return mono, how
	}
	for range kernelLoadTries {
		if offset, from, seq, ok := k.td.BootOffset(k.layout); ok {
			if mono > from {
				k.recordOnce(seq)
				return mono + offset, how
			}
			break
		}
	}
	return k.bootFromHistory(mono, how)
}

// recordOnce records the kernel's conversion seq, the one in force now,
// unless it is the newest recorded: a reading taken under it and mapped
// after the kernel's next update (its goroutine preempted between the
// two) then finds it in the history, as the TSC's and the page's
// readings find theirs (slowAt). One load of the time data per kernel
// update; a compare otherwise.
func (k *kernelConvs) recordOnce(seq uint32) {
	if h := k.head.Load(); h != 0 {
		s := &k.slots[(h-1)%kernelHistoryLen]
		if uint32(s.seqMode.Load()>>32) == seq && s.gen.Load() == h {
			return
		}
	}
	if cur, ok := k.td.Load(k.layout); ok && cur.Seq == seq {
		k.record(&cur)
	}
}

// bootFromHistory is monotonicAt's CLOCK_BOOTTIME for a reading from
// before the kernel's current conversion: the offset of the conversion
// recorded that started before it, where the conversions from it on
// were all seen (so no resume between was missed) or all have its
// offset; otherwise, and for a reading older than every conversion
// kept, the paired map's, bounded by the time the next conversion seen
// starts at.
//
//go:noinline
func (k *kernelConvs) bootFromHistory(mono int64, how kernelMapping) (int64, kernelMapping) {
	var newer *kernelRecord
	var rec kernelRecord
	bound := int64(math.MaxInt64)
	h := k.head.Load()
	for j := h; j > 0 && j+kernelHistoryLen > h; j-- {
		r, ok := k.slots[(j-1)%kernelHistoryLen].load(j)
		if !ok {
			break
		}
		offset, from := bootOffsetOf(&r.conv)
		if mono > from {
			if newer != nil && newer.conv.Seq != r.conv.Seq+2 {
				if newerOffset, _ := bootOffsetOf(&newer.conv); newerOffset != offset {
					break // a resume may lie between
				}
			}
			return mono + offset, how
		}
		bound = from + offset
		rec = r
		newer = &rec
	}
	if bound == math.MaxInt64 {
		return 0, kernelNone
	}
	return bound, kernelBounded
}

// bootOffsetOf is BootOffset of a recorded conversion.
func bootOffsetOf(c *pvclock.Conv) (offset, from int64) {
	mono, boot := c.At(0, c.CycleLast), c.At(1, c.CycleLast)
	return boot - mono, mono
}

// exactKernelLocked says, for Info, how exactly the clock maps onto
// kernel clock i now: "" where the exact path does not answer (the
// clock's counter is not the one the kernel converts, or the vDSO's
// time data cannot be read).
func (c *Clock) exactKernelLocked(i int) string {
	k := kernelConvsOn.Load()
	if k == nil || i >= len(pvclock.Conv{}.Base) {
		return ""
	}
	mode := c.kernelMode(k, funcPtr(c.st.cur.read))
	if mode == kernelModeMonotonic {
		return "exact: the clock reads CLOCK_MONOTONIC itself (the portable source)"
	}
	var cur pvclock.Conv
	ok := false
	for range kernelLoadTries {
		if cur, ok = k.td.Load(k.layout); ok {
			break
		}
	}
	if mode == 0 || !ok {
		return ""
	}
	if cur.Mode != mode {
		var scale pageScale
		if _, ok := k.inMode(0, mode, cur.Mode, &scale); !ok {
			return ""
		}
		return format.Sprintf("exact: the kernel's own conversion of %s (vDSO clock mode %d, its last %d updates), of the clock's %s through the pvclock page's scale",
			modeCounter(cur.Mode), cur.Mode, kernelHistoryLen, modeCounter(mode))
	}
	return format.Sprintf("exact: the kernel's own conversion of %s (vDSO clock mode %d, its last %d updates)", modeCounter(mode), mode, kernelHistoryLen)
}

// modeCounter names the counter of a vDSO clock mode that KernelTime
// converts.
func modeCounter(mode int32) string {
	if mode == pvclock.ModePvclock {
		return "the kvm-clock page"
	}
	return "the TSC"
}
