package schedclock

import (
	"fmt"
	"math"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The stress suite's oracle (stress_test.go runs it): the record of every
// line a clock publishes, kept by the writer's step hook before readers
// can see the line, and the check that some line that can have been
// current during a call explains each reading, or a freezer's pinned
// value does. It proves what stress_test.go's runs show of latch.go's
// protocol, the readers of now.go and now_amd64.s, and the freezer of
// switch.go and suspend.go; TestStressCheckerCatchesBrokenClocks proves
// that the oracle itself catches a reader that steps back, runs ahead or
// reads a replaced bank.

// stressAt evaluates a line at counter value cyc, written independently of
// line.at and the readers (it is checked against referenceNanos, the
// big-integer definition, by TestStressAtIsTheDefinition): the masked
// delta, 0 in the negative zone, times mult plus the remainder, shifted,
// added to the epoch, saturated at math.MaxInt64.
func stressAt(ln *line, cyc uint64) int64 {
	mask := ln.conv.mask
	delta := (cyc - ln.epochCyc) & mask
	if delta > mask-mask>>3 {
		delta = 0
	}
	hi, lo := bits.Mul64(delta, uint64(ln.conv.mult))
	lo, carry := bits.Add64(lo, ln.frac, 0)
	hi += carry
	shift := uint(ln.conv.shift)
	if hi>>shift != 0 {
		return math.MaxInt64
	}
	v := lo >> shift
	if shift > 0 {
		v |= hi << (64 - shift)
	}
	if room := uint64(math.MaxInt64) - uint64(ln.epochNs); v > room {
		return math.MaxInt64
	}
	return int64(uint64(ln.epochNs) + v)
}

// Kinds of recorded lines that read no counter of the run.
const (
	stressFreezer   = -1 // a switch's or Suspend's freezer: constant once pinned
	stressSuspended = -2 // a suspended clock's line: constant
)

// stressLine is one line the writer published, recorded before readers
// could see it.
type stressLine struct {
	index uint64
	ln    line
	// kind is the index of the counter the line reads in the run's
	// counters, or stressFreezer or stressSuspended.
	kind int
	// For a freezer: the value it was pinned at, once the writer has
	// pinned it.
	pinned  atomic.Bool
	pinnedV atomic.Int64
}

// stressRingSize is how many recorded lines a reader can look back on.
// At the writer's pace (some tens of kHz) that is seconds: a reader
// stopped longer between its two loads of the count cannot be checked,
// and the run fails saying so.
const stressRingSize = 1 << 19

// stressStepNs is how long the writer stays at one step in eight (a
// publication has 14): it paces the writer at some tens of kHz of
// publications while it runs.
const stressStepNs = 2000

// stressLog is the record of every line a clock published during a run.
// Only the writer, holding the clock's lock, appends to it.
type stressLog struct {
	slots    []atomic.Pointer[stressLine]
	count    atomic.Uint64
	counters []unsafe.Pointer
	// confused is set if the step hook saw a pin without a freezer line
	// before it: the writer's steps are no longer what the hook expects.
	confused atomic.Bool
}

func newStressLog(counters []func() uint64) *stressLog {
	lg := &stressLog{slots: make([]atomic.Pointer[stressLine], stressRingSize)}
	for _, read := range counters {
		lg.counters = append(lg.counters, funcPtr(read))
	}
	return lg
}

func (lg *stressLog) kindOf(read func() uint64) int {
	p := funcPtr(read)
	for i, q := range lg.counters {
		if p == q {
			return i
		}
	}
	if p == funcPtr(readSuspended) {
		return stressSuspended
	}
	return stressFreezer
}

func (lg *stressLog) record(ln line) {
	k := lg.count.Load()
	lg.slots[k%stressRingSize].Store(&stressLine{index: k, ln: ln, kind: lg.kindOf(ln.read)})
	lg.count.Store(k + 1)
}

func (lg *stressLog) line(k uint64) *stressLine {
	if rec := lg.slots[k%stressRingSize].Load(); rec != nil && rec.index == k {
		return rec
	}
	return nil
}

// attach makes c record every line it publishes into lg, starting with
// the current one, until detach is called.
//
// A publication (latch.publish) stores bank 1 first, while seq is still
// even, and its first step is "bank.read": the line is recorded there,
// before the seq increment that lets readers see it. At a freezer's
// ".fixed" step the writer has just pinned it (switch.go, freeze): the
// freezer now reads the pinned counter value for good.
func (lg *stressLog) attach(c *Clock) (detach func()) {
	c.mu.Lock()
	defer c.unlock()
	prev := c.step
	lg.record(c.cur)
	dice := uint64(0x9e3779b97f4a7c15) // only the writer, holding c.mu, rolls it
	c.step = func(step string) {
		switch {
		case step == "bank.read" && c.latch.seq.Load()%2 == 0:
			lg.record(c.cur)
		case strings.HasSuffix(step, ".fixed"):
			rec := lg.line(lg.count.Load() - 1)
			if rec == nil || rec.kind != stressFreezer {
				lg.confused.Store(true)
				break
			}
			rec.pinnedV.Store(stressAt(&c.cur, c.cur.read()))
			rec.pinned.Store(true)
		}
		// Stay a while at one step in eight, at random: a writer stopped
		// by preemption, a signal or the OS is then stopped inside a
		// publication, with readers running on, much more often than
		// between two, and the other steps follow each other as fast as
		// they do without the hook, where a reader that misses a re-check
		// reads half of one line and half of another.
		dice ^= dice << 13
		dice ^= dice >> 7
		dice ^= dice << 17
		if dice%8 == 0 {
			for start := readMono(); readMono()-start < stressStepNs; {
			}
		}
		prev(step)
	}
	return func() {
		c.mu.Lock()
		defer c.unlock()
		c.step = prev
	}
}

// stressPending is a reading that only a freezer not yet pinned when it
// was checked can explain: it is checked once the run is over.
type stressPending struct {
	rec     *stressLine
	reading int64
}

// stressReader is what one reader found.
type stressReader struct {
	reads      int
	straddled  int   // readings during which a line was published
	midWrite   int   // readings begun while the writer was inside an operation
	oddSeq     int   // readings begun while seq was odd: in the middle of a publication
	frozen     int   // readings a freezer explains: during a switch or a Suspend
	ownBack    int   // readings below this reader's previous one
	hbBack     int   // readings below the mark loaded before the call
	deepest    int64 // the largest step back, ns
	torn       int
	unverified int // readings whose candidate lines the ring no longer held
	examples   []string
	pending    map[stressPending]struct{}
}

func (r *stressReader) note(format string, args ...any) {
	if len(r.examples) < 3 {
		msg := fmt.Sprintf(format, args...)
		if len(msg) > 1000 {
			msg = msg[:1000] + "..."
		}
		r.examples = append(r.examples, msg)
	}
}

// resolve checks the pending readings whose freezer the writer has pinned
// by now, and at the end (final) those whose freezer it never pinned.
func (r *stressReader) resolve(final bool) {
	for p := range r.pending {
		pinned := p.rec.pinned.Load()
		if !pinned && !final {
			continue
		}
		if !pinned || p.rec.pinnedV.Load() != p.reading {
			r.torn++
			r.note("reading %d from freezer line %d, pinned %v at %d", p.reading, p.rec.index, pinned, p.rec.pinnedV.Load())
		}
		delete(r.pending, p)
	}
}

// check reports whether reading r is explained by a line that can have
// been current during the call (the count was n0 before it, n1 after it,
// the counters read before and after), or may be by a freezer not pinned
// yet (checked at the end); it counts a torn reading if not.
func (lg *stressLog) check(rd *stressReader, r int64, n0, n1 uint64, before, after []uint64) bool {
	// Line n0-1 may be recorded but not yet published, so n0-2 may still
	// be the current one; line n1-1 is the last that can have been seen.
	lo := uint64(0)
	if n0 >= 2 {
		lo = n0 - 2
	}
	var unpinned *stressLine
	for k := n1; k > lo; {
		k--
		rec := lg.line(k)
		if rec == nil {
			rd.unverified++
			return true
		}
		switch rec.kind {
		case stressSuspended:
			if r == stressAt(&rec.ln, 0) {
				return true
			}
		case stressFreezer:
			if !rec.pinned.Load() {
				unpinned = rec
			} else if r == rec.pinnedV.Load() {
				rd.frozen++
				return true
			}
		default:
			if stressAt(&rec.ln, before[rec.kind]) <= r && r <= stressAt(&rec.ln, after[rec.kind]) {
				return true
			}
		}
	}
	if unpinned != nil {
		if rd.pending == nil {
			rd.pending = make(map[stressPending]struct{})
		}
		rd.pending[stressPending{unpinned, r}] = struct{}{}
		rd.frozen++
		return true
	}
	rd.torn++
	var lines []string
	for k := n1; k > lo; {
		k--
		if rec := lg.line(k); rec != nil {
			lines = append(lines, fmt.Sprintf("line %d kind %d %+v", k, rec.kind, rec.ln))
		}
	}
	rd.note("reading %d explained by no line %d..%d (counters before %v, after %v): %s", r, lo, n1-1, before, after, strings.Join(lines, "; "))
	return false
}

// TestStressCheckerCatchesBrokenClocks runs the checker on clocks that
// break each rule it enforces: each must be caught, or a clean run of the
// stress test would prove nothing.
func TestStressCheckerCatchesBrokenClocks(t *testing.T) {
	const reads = 50_000
	newCase := func(t *testing.T) stressCase {
		c, err := New(Portable())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return stressCase{name: "broken", clock: c, counters: []func() uint64{readMono}, cpu: -1,
			writes: stressWrites(c, nil)}
	}
	t.Run("steps back", func(t *testing.T) {
		sc := newCase(t)
		var calls atomic.Int64
		res := stressRun(t, sc, func() int64 {
			if calls.Add(1)%2000 == 0 {
				// 1 ms in the past: more than any two readings are apart,
				// even under the race detector.
				return sc.clock.nanos() - 1_000_000
			}
			return sc.clock.nanos()
		}, reads)
		assert.Positive(t, res.ownBack, "steps back of 1 ms not seen by the reader")
		assert.Positive(t, res.hbBack, "steps back of 1 ms not seen as inversions")
		assert.Positive(t, res.torn, "a value 1 ms in the past is explained by no line")
		assert.Positive(t, res.deepest)
		assert.LessOrEqual(t, res.deepest, int64(1_000_000), "deeper than the step back")
	})
	t.Run("from the future", func(t *testing.T) {
		// Ahead of the counter read after the call: no line gives it.
		sc := newCase(t)
		var calls atomic.Int64
		res := stressRun(t, sc, func() int64 {
			if calls.Add(1)%2000 == 0 {
				return sc.clock.nanos() + 100_000
			}
			return sc.clock.nanos()
		}, reads)
		assert.Positive(t, res.torn, "a value 100 µs ahead of the counter is explained by no line")
	})
	t.Run("stale bank", func(t *testing.T) {
		// The line from before the last Suspend, read at the current
		// counter: what a reader that combines a bank replaced since with
		// a fresh counter value gets. That line runs ahead of the current
		// one by the time the clock stood still.
		sc := newCase(t)
		var calls atomic.Int64
		var mu sync.Mutex
		var stale line
		func(c *Clock) {
			c.mu.Lock()
			defer c.unlock()
			inner := c.step
			c.step = func(step string) {
				if step == "suspend.frozen" {
					mu.Lock()
					stale = c.cur
					stale.read = readMono
					mu.Unlock()
				}
				inner(step)
			}
		}(sc.clock)
		res := stressRun(t, sc, func() int64 {
			if calls.Add(1)%1000 == 0 {
				mu.Lock()
				ln := stale
				mu.Unlock()
				if ln.read != nil {
					return stressAt(&ln, readMono())
				}
			}
			return sc.clock.nanos()
		}, reads)
		assert.Positive(t, res.torn, "readings of a replaced line are explained by no line")
	})
}

// TestStressAtIsTheDefinition checks the checker's arithmetic against the
// big-integer definition.
func TestStressAtIsTheDefinition(t *testing.T) {
	x := uint64(0x9e3779b97f4a7c15)
	next := func() uint64 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return x
	}
	for i := 0; i < 20_000; i++ {
		bitsN := 1 + int(next()%64)
		shift := uint32(next() % 64)
		ln := line{conv: conversion{mult: uint32(next()), shift: shift, mask: maskOf(bitsN)},
			epochCyc: next() & maskOf(bitsN), epochNs: int64(next() >> (next() % 64)), frac: next() & (uint64(1)<<shift - 1)}
		if ln.conv.mult == 0 {
			ln.conv.mult = 1
		}
		cyc := ln.epochCyc + next()>>(next()%64)
		require.Equal(t, referenceNanos(ln, cyc), stressAt(&ln, cyc), "line %+v at %d", ln, cyc)
	}
}
