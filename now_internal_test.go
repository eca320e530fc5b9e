package schedclock

import (
	"bytes"
	"fmt"
	"math"
	"math/bits"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/cpu"
	"github.com/schedclock/schedclock/internal/osthread"
	"github.com/schedclock/schedclock/internal/race"
	"github.com/schedclock/schedclock/internal/testutil/pprofdecode"
)

// The read path (now.go, now_amd64.{go,s}, now_other.go) from inside:
// the assembly and the Go reader against each other and against lines
// published by hand. now_test.go has what the public API can show.

// The read path's logical safeguards are tested here deterministically,
// each test written to fail when its safeguard is removed (tools/mutants
// applies the removals): the fast path's window edge, the Go reader's
// re-check of seq. The ordering safeguards are in latch_qualify_test.go.

// TestNowPathsAgree runs the assembly reader (amd64) and the generic Go
// reader over the same clock, interleaved: they must agree, and time must
// never go backwards from one to the other.
func TestNowPathsAgree(t *testing.T) {
	hw, ok := hardwareExpected(t)
	if !ok {
		return
	}
	if hw.Rate == 0 {
		hz, _, err := measureRate(hw.Read, 20*time.Millisecond)
		require.NoError(t, err)
		hw.Rate = uint64(hz)
	}
	c, err := New(hw)
	require.NoError(t, err)
	defer c.Close()
	last := c.nanos()
	for i := 0; i < 100000; i++ {
		var now int64
		if i%2 == 0 {
			now = c.nanos()
		} else {
			now = c.now()
		}
		require.GreaterOrEqual(t, now, last, "iteration %d", i)
		last = now
	}

	// Counter values the fast paths refuse: below the epoch (clamped to
	// it), and far enough ahead that delta*mult overflows 64 bits.
	c.st.mu.Lock()
	ln := c.st.cur
	ln.epochCyc = hw.Read() + uint64(hw.Rate)*1000
	ln.epochNs = 1234
	c.publishLocked(ln)
	c.unlock()
	assert.Equal(t, int64(1234), c.nanos())
	assert.Equal(t, int64(1234), c.now())

	c.st.mu.Lock()
	ln.epochCyc = hw.Read() - ln.conv.overflowFrom()*3
	c.publishLocked(ln)
	c.unlock()
	before, _ := ln.at(hw.Read())
	got, gotGeneric := c.nanos(), c.now()
	after, _ := ln.at(hw.Read())
	assert.GreaterOrEqual(t, got, before)
	assert.GreaterOrEqual(t, gotGeneric, got)
	assert.GreaterOrEqual(t, after, gotGeneric)
	assert.Greater(t, before, int64(ln.conv.nanos(ln.conv.overflowFrom())), "the 128-bit path must be taken")
}

// publishLine makes ln the clock's line, as a writer would.
func publishLine(c *Clock, ln line) {
	c.st.mu.Lock()
	defer c.unlock()
	c.publishLocked(ln)
}

// TestFastPathWindowEdges: the fast path's window ends exactly where the
// negative zone begins or where delta*mult + remainder would overflow 64
// bits, whichever comes first; at the last deltas inside it and the first
// ones outside, every reader agrees with the definition computed in
// arbitrary precision. (FuzzLine finds a window one too wide only with
// -fuzz.)
func TestFastPathWindowEdges(t *testing.T) {
	counter := &FakeCounter{}
	c, err := New(counter.Source("edge", 64, 1_000_000_000))
	require.NoError(t, err)
	require.NoError(t, c.Close()) // only this test publishes
	var endsAtNegative, endsAtOverflow, checked int
	for _, bits := range []int{4, 8, 16, 32, 48, 56, 63, 64} {
		for _, rate := range []uint64{1, 1000, 32768, 24_000_000, 1_000_000_000, 3_000_000_000, 10_000_000_000} {
			conv, err := newConversion(Source{Name: "edge", Read: counter.Read, Bits: bits, Rate: rate})
			if err != nil {
				continue // wraps too fast to be tracked
			}
			window := conv.window()
			if negativeFrom(conv.mask) <= conv.overflowFrom() {
				endsAtNegative++
			} else {
				endsAtOverflow++
			}
			// The largest remainder makes the first delta past the
			// overflow horizon overflow for sure.
			for _, frac := range []uint64{0, 1<<conv.shift - 1} {
				for _, delta := range []uint64{window - 1, window, window + 1, window + 2} {
					ln := line{read: counter.Read, conv: conv, epochCyc: 3 & conv.mask, epochNs: 1000, frac: frac}
					cyc := ln.epochCyc + delta
					want := referenceNanos(ln, cyc)
					publishLine(c, ln)
					counter.Set(cyc)
					at, _ := ln.at(cyc)
					assert.Equal(t, want, at, "line.at: %d bits, %d Hz, delta window%+d, frac %d", bits, rate, int64(delta-window), frac)
					assert.Equal(t, want, c.nanos(), "Now: %d bits, %d Hz, delta window%+d, frac %d", bits, rate, int64(delta-window), frac)
					assert.Equal(t, want, c.now(), "now: %d bits, %d Hz, delta window%+d, frac %d", bits, rate, int64(delta-window), frac)
					checked++
				}
			}
		}
	}
	assert.NotZero(t, endsAtNegative, "no width/rate whose window ends at the negative zone")
	assert.NotZero(t, endsAtOverflow, "no width/rate whose window ends at the 64-bit overflow")
	assert.Greater(t, checked, 200)
}

// TestGenericReaderRechecksSeq: the Go reader loads the bank's fields
// after the counter read, so a publication during the read rewrites them
// under it; it must check seq again and read again. Here the counter's
// read itself publishes a line on another counter: read again, the clock
// gives the new line at the new counter's value; without the re-check it
// would mix the new line's fields with the old counter's value. (On amd64
// the TSC's slow path is this reader too.)
func TestGenericReaderRechecksSeq(t *testing.T) {
	a, b := &FakeCounter{}, &FakeCounter{}
	a.Set(1000)
	b.Set(5_000_000)
	c, err := New(a.Source("a", 64, 1e9))
	require.NoError(t, err)
	require.NoError(t, c.Close()) // only this test publishes
	lineB := line{read: b.Read, conv: c.st.cur.conv, epochCyc: 5_000_000, epochNs: 1 << 40}
	published := false
	ln := c.st.cur
	ln.read = func() uint64 {
		v := a.Read()
		if !published {
			published = true
			publishLine(c, lineB) // the writer, between the counter read and the re-check
		}
		return v
	}
	publishLine(c, ln)
	b.Add(100)
	assert.Equal(t, int64(1<<40+100), c.now())
	assert.True(t, published)
}

// TestPortableReaderEdges: the portable reader (otherNow's own read of
// Go's clock, which no FakeCounter reaches) agrees with the line's
// definition at its edges, as Now and the generic reader do, on the
// declared line (a pure offset) and on a refined one: a clock reading
// below the epoch clamps to it, and one past the room left below
// math.MaxInt64 saturates there.
func TestPortableReaderEdges(t *testing.T) {
	c, err := New(Portable())
	require.NoError(t, err)
	require.NoError(t, c.Close()) // only this test publishes
	declared := c.st.cur
	require.NotZero(t, declared.pureOffset(), "the portable line is not a pure offset")
	refined := declared
	refined.conv, err = conversionFor("portable", 1_000_000_100, 63)
	require.NoError(t, err)
	require.Zero(t, refined.pureOffset(), "a refined rate taken for a pure offset")

	readers := map[string]func() int64{"otherNow": func() int64 { return otherNow(c) }, "Now": c.nanos, "now": c.now}
	for _, ln := range []line{declared, refined} {
		name := fmt.Sprintf("%d/2^%d", ln.conv.mult, ln.conv.shift)
		for reader, read := range readers {
			// Within the window: between the line at readings taken
			// before and after.
			ln.epochCyc, ln.epochNs = readMono(), 1<<40
			publishLine(c, ln)
			before, _ := ln.at(readMono())
			got := read()
			after, _ := ln.at(readMono())
			assert.True(t, before <= got && got <= after, "%s, %s: %d not in [%d, %d]", name, reader, got, before, after)

			// Below the epoch: the epoch.
			ln.epochCyc = readMono() + uint64(time.Hour)
			publishLine(c, ln)
			assert.Equal(t, int64(1<<40), read(), "%s, %s: a reading below the epoch", name, reader)

			// Past the room below math.MaxInt64: saturated.
			ln.epochCyc, ln.epochNs = readMono()-uint64(time.Second), math.MaxInt64-1000
			publishLine(c, ln)
			assert.Equal(t, int64(math.MaxInt64), read(), "%s, %s: a reading past math.MaxInt64", name, reader)
		}
	}
}

// The stress suite's oracle (TestStressNowUnderSIGPROF runs it): the record of every
// line a clock publishes, kept by the writer's step hook before readers
// can see the line, and the check that some line that can have been
// current during a call explains each reading, or a freezer's pinned
// value does. It proves what the stress runs show of latch.go's
// protocol, the readers of now.go and now_amd64.s, and the freezer of
// switch.go (Suspend and Resume included); TestStressCheckerCatchesBrokenClocks proves
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
	c.st.mu.Lock()
	defer c.unlock()
	prev := c.st.writer.step
	lg.record(c.st.cur)
	dice := uint64(0x9e3779b97f4a7c15) // only the writer, holding c.mu, rolls it
	c.st.writer.step = func(step string) {
		switch {
		case step == "bank.read" && c.latch.seq.Load()%2 == 0:
			lg.record(c.st.cur)
		case strings.HasSuffix(step, ".fixed"):
			rec := lg.line(lg.count.Load() - 1)
			if rec == nil || rec.kind != stressFreezer {
				lg.confused.Store(true)
				break
			}
			rec.pinnedV.Store(stressAt(&c.st.cur, c.st.cur.read()))
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
		c.st.mu.Lock()
		defer c.unlock()
		c.st.writer.step = prev
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
		// counter once the clock has resumed: what a reader that combines
		// a bank replaced since with a fresh counter value gets. That line
		// runs ahead of the current one by the time the clock stood still.
		// While the writer is inside Suspend the old line may still be
		// current, so readings of it are explained: the test counts only
		// those taken after a Resume, and runs until it has enough, however
		// long a loaded machine keeps the writer from resuming.
		sc := newCase(t)
		var calls, injected atomic.Int64
		var mu sync.Mutex
		var stale, suspended line
		func(c *Clock) {
			c.st.mu.Lock()
			defer c.unlock()
			inner := c.st.writer.step
			c.st.writer.step = func(step string) {
				mu.Lock()
				switch step {
				case "suspend.frozen":
					stale, suspended = line{}, c.st.cur
					suspended.read = readMono
				case "resume.published":
					stale = suspended
				}
				mu.Unlock()
				inner(step)
			}
		}(sc.clock)
		torn, runs := 0, 0
		for ; injected.Load() < 50 && runs < 1000; runs++ {
			res := stressRun(t, sc, func() int64 {
				if calls.Add(1)%1000 == 0 {
					mu.Lock()
					ln := stale
					mu.Unlock()
					if ln.read != nil {
						injected.Add(1)
						return stressAt(&ln, readMono())
					}
				}
				return sc.clock.nanos()
			}, reads)
			torn += res.torn
		}
		require.GreaterOrEqual(t, injected.Load(), int64(50), "the writer never resumed in %d runs", runs)
		assert.Positive(t, torn, "%d readings of a replaced line, none caught", injected.Load())
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

// A cross-cutting suite: the seed's NMI test, in Go. It proves, under SIGPROF on every thread, the
// seqcount latch's protocol (latch.go), the readers (now.go,
// now_amd64.{go,s}, now_other.go), the writer's paths that publish
// (Update in schedclock.go, Register and the freezer in switch.go,
// Suspend and Resume in switch.go), on the portable source (source.go),
// a fake counter, the default clock (default.go) and the hardware counter
// (Hardware, counter.go). Its oracle, and the oracle's own
// tests, are above.
//
// In the kernel the danger is an NMI that interrupts the writer half-way
// through an update and reads the clock on the same CPU. Here readers run
// on every P (max(2, GOMAXPROCS) goroutines, at GOMAXPROCS=1 and at
// NumCPU), a writer publishes back to back, tens of kHz of lines (Update
// mostly, a Register of a same-rate source, a rate refinement, Suspend
// and Resume), pausing inside its steps at random, and SIGPROF floods
// every reader's and the writer's thread: CPU profiling runs at 10 kHz,
// and since the kernel fires the profiler's CPU-time timers only at its
// ticks, a monotonic timer of each thread's own sends it SIGPROF at
// 10 kHz too (on Linux). Readers and the writer are so
// interrupted at arbitrary instructions: the writer half-way through its
// steps, with readers running on its P at GOMAXPROCS=1.
//
// Every reading is checked three ways:
//
//   - it is not below the reader's own previous reading;
//   - it is not below a shared high-water mark loaded before the call
//     (happens-before order across goroutines; the mark is raised with a
//     CAS-max after every reading that is not torn);
//   - it is not torn: some line the writer published explains it. The
//     writer's step hook records every line before readers can see it; a
//     reader reads each counter the lines use before and after its Now,
//     and loads the number of recorded lines before and after. The
//     reading must lie within [line(counter before), line(counter after)]
//     for one of the lines that can have been current during the call,
//     equal the value of a suspended line, or equal the value a freezer
//     line was pinned at (readings of a freezer the writer had not pinned
//     yet are checked at the end). A value read from a mix of two lines'
//     fields lands outside every bracket by the distance between the
//     lines' epochs (microseconds here); the check cannot see a value off
//     by less than the bracket, the time between the two counter reads
//     (some tens of nanoseconds).
//
// The count of readings is fixed, not the time: on a loaded machine the
// test takes longer, it does not check less.
//
// What a machine can show: the Go reader (portable, fake, and the default
// clock where it runs on the portable source) on every CPU at once,
// wherever the writer stops. The hardware counter's assembly reader runs
// on every CPU only where the kernel trusts the counter; where it does not
// (the 2-vCPU AMD EPYC KVM guest this was written on: tsc=unstable, and
// its vCPUs' TSCs are not in step) readers and writer share one CPU, so
// a reader is only ever interrupted, never overlapped, by the writer, and
// a missing re-check or fence in clockNow (now_amd64.s) cannot show there: a reader
// would have to be interrupted between two of its field loads, a window
// of a few instructions. Nor can the ordering of the counter read itself
// (LFENCE, ISB) show in a check that brackets readings by counter reads
// on the same thread; and under qemu-aarch64 nothing about arm64's memory
// ordering shows at all.

// stressEnv names the environment variable that sets how many readings
// TestStressNowUnderSIGPROF takes in all, split evenly over its runs (one
// clock at one GOMAXPROCS).
const stressEnv = "SCHEDCLOCK_STRESS_READS"

// stressDefaultReads is the readings TestStressNowUnderSIGPROF takes when
// stressEnv is unset. Under the race detector, which makes every atomic
// operation some ten times slower and is there to see the protocol rather
// than to count, it takes a hundredth of it; so it does under user-mode
// emulation (make test-arm64: qemu-aarch64 on an x86 host), where a
// reading is some 50 times slower and a signal slower still, and which can
// show that the arm64 reader runs the protocol, not how the hardware
// orders it.
const stressDefaultReads = 10_000_000

// stressProfileHz is how often each thread is interrupted by SIGPROF.
const stressProfileHz = 10_000

// stressTotalReads returns the readings TestStressNowUnderSIGPROF takes.
func stressTotalReads(t *testing.T) int {
	if s := os.Getenv(stressEnv); s != "" {
		n, err := strconv.ParseFloat(s, 64) // 1e9 is accepted
		require.NoError(t, err, "%s=%q", stressEnv, s)
		require.True(t, n >= 1 && n <= math.MaxInt64/2, "%s=%q", stressEnv, s)
		return int(n)
	}
	if race.Enabled || cpu.Emulated() {
		return stressDefaultReads / 100
	}
	return stressDefaultReads
}

// stressCase is one clock under stress.
type stressCase struct {
	name  string
	clock *Clock
	// counters lists every counter the clock's lines read (by the same
	// func value as in their Source): each is read before and after
	// every Now to bracket it.
	counters []func() uint64
	// writes are the writer's operations, taken in turn.
	writes []func()
	// cpu, if not negative, is the CPU every reader and the writer are
	// pinned to: for a counter that is not in step across CPUs.
	cpu int
	// sigprofHz, if not 0, is how often a timer of its own sends SIGPROF
	// to each reader's and the writer's thread.
	sigprofHz int
}

// stressResult sums the readers.
type stressResult struct {
	stressReader
	publications uint64
	writerOps    int
	readers      int
	elapsed      time.Duration
}

// stressRun runs sc's readers and writer until the readers have taken
// reads readings between them. now reads the clock (sc.clock.Now unless a
// test of the checker itself gives a broken one).
func stressRun(t *testing.T, sc stressCase, now func() int64, reads int) stressResult {
	t.Helper()
	lg := newStressLog(sc.counters)
	detach := lg.attach(sc.clock)
	defer detach()

	// At least two readers, so that happens-before order across
	// goroutines is checked at GOMAXPROCS=1 too.
	readers := max(2, runtime.GOMAXPROCS(0))
	// Every reader and the writer is locked to a thread of its own (never
	// unlocked: the thread exits with the goroutine), pinned to sc.cpu if
	// asked, and sent SIGPROF at sc.sigprofHz by a timer of its own.
	var signalErr atomic.Pointer[error]
	enter := func() (leave func()) {
		runtime.LockOSThread()
		unpin := func() {}
		if sc.cpu >= 0 {
			var err error
			if unpin, err = stressPinThread(sc.cpu); err != nil {
				panic(err)
			}
		}
		if sc.sigprofHz == 0 {
			return unpin
		}
		stop, err := osthread.SignalProf(sc.sigprofHz)
		if err != nil {
			signalErr.Store(&err)
			return unpin
		}
		return func() { stop(); unpin() }
	}

	var (
		mark    atomic.Int64
		done    atomic.Bool
		writing atomic.Bool
		writer  sync.WaitGroup
		readWG  sync.WaitGroup
		results = make([]stressReader, readers)
		ops     int
	)
	mark.Store(math.MinInt64)
	start := time.Now()
	writer.Add(1)
	started := make(chan struct{})
	go func() {
		defer writer.Done()
		defer enter()()
		// Back to back: the step hook makes each publication last some
		// microseconds, so that preemption, SIGPROF and the OS stop the
		// writer inside its steps rather than between them.
		for ; !done.Load(); ops++ {
			writing.Store(true)
			sc.writes[ops%len(sc.writes)]()
			writing.Store(false)
			if ops == 0 {
				close(started)
			}
		}
	}()
	// The readers start once the writer is running: at GOMAXPROCS=1, when
	// it has been preempted, most likely inside an operation.
	<-started
	for i := range results {
		readWG.Add(1)
		go func(rd *stressReader, n int) {
			defer readWG.Done()
			defer enter()()
			var before, after [4]uint64
			counters := sc.counters
			prev := int64(math.MinInt64)
			for ; rd.reads < n; rd.reads++ {
				n0 := lg.count.Load()
				if writing.Load() {
					rd.midWrite++
				}
				if sc.clock.latch.seq.Load()%2 == 1 {
					rd.oddSeq++
				}
				floor := mark.Load()
				for k, read := range counters {
					before[k] = read()
				}
				r := now()
				for k := len(counters) - 1; k >= 0; k-- {
					after[k] = counters[k]()
				}
				n1 := lg.count.Load()
				if n1 != n0 {
					rd.straddled++
				}
				if r < prev {
					rd.ownBack++
					rd.deepest = max(rd.deepest, prev-r)
					rd.note("reading %d after this reader's %d", r, prev)
				}
				if r < floor {
					rd.hbBack++
					rd.deepest = max(rd.deepest, floor-r)
					rd.note("reading %d below the mark %d loaded before the call", r, floor)
				}
				prev = r
				// A torn reading does not raise the mark: one value far
				// ahead would make every later reading an inversion.
				if lg.check(rd, r, n0, n1, before[:len(counters)], after[:len(counters)]) {
					for cur := mark.Load(); r > cur && !mark.CompareAndSwap(cur, r); cur = mark.Load() {
					}
				}
				if rd.reads%4096 == 0 && len(rd.pending) > 0 {
					rd.resolve(false)
				}
			}
		}(&results[i], (reads+readers-1)/readers)
	}
	readWG.Wait()
	done.Store(true)
	writer.Wait()
	sc.clock.Resume() // the writer may have stopped after a Suspend

	res := stressResult{publications: lg.count.Load() - 1, writerOps: ops, readers: readers, elapsed: time.Since(start)}
	for i := range results {
		rd := &results[i]
		rd.resolve(true)
		res.reads += rd.reads
		res.straddled += rd.straddled
		res.midWrite += rd.midWrite
		res.oddSeq += rd.oddSeq
		res.frozen += rd.frozen
		res.ownBack += rd.ownBack
		res.hbBack += rd.hbBack
		res.deepest = max(res.deepest, rd.deepest)
		res.torn += rd.torn
		res.unverified += rd.unverified
		res.examples = append(res.examples, rd.examples...)
	}
	assert.False(t, lg.confused.Load(), "%s: the step hook saw a pin with no freezer line before it", sc.name)
	if err := signalErr.Load(); err != nil {
		t.Logf("%s: only the profiler's own SIGPROFs: %v", sc.name, *err)
	}
	return res
}

// assertClean checks that a run saw no inversion, no torn value, and that
// it did what it set out to do.
func (res stressResult) assertClean(t *testing.T, name string, reads int) {
	t.Helper()
	t.Logf("%s: %d readings (%.2f M/s) by %d goroutines at GOMAXPROCS=%d in %v; %d publications (%.0f Hz) from %d writer operations; "+
		"readings begun with the writer inside an operation %d, in the middle of a publication (seq odd) %d; readings of a freezer %d; "+
		"readings a publication straddled %d; inversions %d (own) %d (happens-before), torn %d",
		name, res.reads, float64(res.reads)/res.elapsed.Seconds()/1e6, res.readers, runtime.GOMAXPROCS(0), res.elapsed.Round(time.Millisecond),
		res.publications, float64(res.publications)/res.elapsed.Seconds(), res.writerOps,
		res.midWrite, res.oddSeq, res.frozen, res.straddled, res.ownBack, res.hbBack, res.torn)
	assert.GreaterOrEqual(t, res.reads, reads, "%s: readings", name)
	if len(res.examples) > 0 {
		t.Logf("%s: first failures seen by each reader:\n\t%s", name, strings.Join(res.examples, "\n\t"))
	}
	assert.Zero(t, res.ownBack, "%s: readings below the reader's previous one (deepest %d ns)", name, res.deepest)
	assert.Zero(t, res.hbBack, "%s: readings below the happens-before mark (deepest %d ns)", name, res.deepest)
	assert.Zero(t, res.torn, "%s: torn readings", name)
	assert.Zero(t, res.unverified, "%s: readings whose lines left the ring before they were checked", name)
	// The writer ran among the readers, and was stopped inside its
	// operations while they read. (Lines published during a reading are
	// logged, not required: at GOMAXPROCS=1 a reader is rarely preempted
	// inside its few hundred nanoseconds.)
	if res.reads >= 1_000_000 {
		assert.Positive(t, res.midWrite, "%s: no reading began with the writer inside an operation", name)
	} else if res.midWrite == 0 {
		// Under -race or qemu the run is a hundredth as long, and at
		// GOMAXPROCS=1 the writer may never be caught mid-operation.
		t.Logf("%s: no reading began with the writer inside an operation (%d readings)", name, res.reads)
	}
	if res.reads >= 1_000_000 {
		assert.Greater(t, res.publications, uint64(16), "%s: publications", name)
	} else {
		assert.Positive(t, res.publications, "%s: publications", name)
	}
}

// stressProfile floods every thread with SIGPROF until the returned
// function is called, which returns how many samples (signals handled by
// the profiler) the profile holds, or -1 if another profile was running.
//
// The kernel decides how many signals arrive: a thread's CPU-time timer
// expires at a scheduler tick, so at most about CONFIG_HZ signals a
// second reach each busy thread, whatever rate is asked for (on this
// project's KVM guest, some 100 per thread and second).
func stressProfile(t *testing.T) (stop func() int64) {
	// The rate must be set before StartCPUProfile, which then keeps it
	// (and has the runtime print that it cannot set the rate it asks for).
	runtime.SetCPUProfileRate(stressProfileHz)
	var profile bytes.Buffer
	if err := pprof.StartCPUProfile(&profile); err != nil {
		// A profile is already running (go test -cpuprofile): its
		// SIGPROFs, at its own rate, are the flood.
		runtime.SetCPUProfileRate(0)
		t.Logf("CPU profiling already running (%v): SIGPROF at its rate", err)
		return func() int64 { return -1 }
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			pprof.StopCPUProfile()
		}
	})
	return func() int64 {
		pprof.StopCPUProfile()
		stopped = true
		samples, err := pprofdecode.Samples(profile.Bytes())
		require.NoError(t, err)
		return samples
	}
}

// stressCases returns the clocks to stress.
func stressCases(t *testing.T) []stressCase {
	var cases []stressCase

	// The default clock: on the hardware counter where this machine has a
	// trusted one, else on the portable source. A Register would end its
	// calibration for the rest of the test binary, so the writer only
	// updates, suspends and resumes it.
	def := Default()
	// Until its set-up has started, the default clock reads Go's
	// monotonic clock through readDefaultFirstUse (default.go): the
	// same counter, read the same way.
	defCounters := []func() uint64{readMono, readDefaultFirstUse}
	if hw, _, _, err := probeHardware(); err == nil {
		defCounters = append(defCounters, hw.Read)
	}
	cases = append(cases, stressCase{name: "default", clock: def, counters: defCounters, cpu: -1,
		writes: stressWrites(def, nil)})

	// New(Portable()), Registered again (the same counter at the same
	// rate: anchored at the pinned value).
	p, err := New(Portable())
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	cases = append(cases, stressCase{name: "portable", clock: p, counters: []func() uint64{readMono}, cpu: -1,
		writes: stressWrites(p, func() {
			if err := p.Register(Portable()); err != nil {
				panic(err)
			}
		})})

	// Fake counters on one true time, Go's monotonic clock: a 32-bit and
	// a 64-bit counter at 24 MHz (mult is not exact there), starting far
	// apart. The writer switches between them (two different counters:
	// related by bracketed reads), and after each switch refines the rate
	// (the same counter: anchored at the pinned value), alternately to
	// 1 Hz less and back.
	narrow := Source{Name: "fake32", Bits: 32, Rate: 24_000_000, Read: func() uint64 {
		return readMono() * 24 / 1000 & maskOf(32)
	}}
	wide := Source{Name: "fake64", Bits: 64, Rate: 24_000_000, Read: func() uint64 {
		return readMono()*24/1000 + 1<<40
	}}
	f, err := New(narrow)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	sources := []Source{wide, narrow}
	switches := 0
	cases = append(cases, stressCase{name: "fake", clock: f, counters: []func() uint64{narrow.Read, wide.Read}, cpu: -1,
		writes: stressWrites(f, func() {
			switches++
			if err := f.Register(sources[switches%2]); err != nil {
				panic(err)
			}
			f.st.mu.Lock()
			defer f.st.mu.Unlock()
			// Only down, or the next Register would be refused as slower.
			refined := f.st.src
			refined.Rate = 24_000_000 - uint64(switches%2)
			conv, err := newConversion(refined)
			if err == nil {
				err = f.switchLocked(refined, conv, rating{hz: float64(refined.Rate), origin: rateRefined})
			}
			if err != nil {
				panic(err)
			}
		})})

	// The hardware counter through its assembly reader, while the writer
	// publishes. Where the counter is trusted (in step across CPUs),
	// readers and the writer run on every CPU. Where it is not (the
	// kernel left the TSC, as on this project's 2-vCPU KVM guest with
	// tsc=unstable), only readings on one CPU can be compared: readers
	// and writer are all pinned to one, and the clock has no background
	// goroutine, so nothing publishes from another CPU.
	if hw, cpu, ok := stressHardware(t); ok {
		c, err := newClock(hw, rating{hz: float64(hw.Rate), origin: rateMeasured}, nil)
		require.NoError(t, err)
		name := hw.Name
		if cpu >= 0 {
			name += fmt.Sprintf(" pinned to CPU %d", cpu)
		}
		cases = append(cases, stressCase{name: name, clock: c, counters: []func() uint64{hw.Read}, cpu: cpu,
			writes: stressWrites(c, func() {
				if err := c.Register(hw); err != nil {
					panic(err)
				}
			})})
	}
	return cases
}

// stressWrites returns the writer's operations: mostly Update, then
// register (if not nil), Suspend and Resume.
func stressWrites(c *Clock, register func()) []func() {
	writes := []func(){}
	for range 12 {
		writes = append(writes, func() { _ = c.Update() })
	}
	if register != nil {
		writes = append(writes, register)
	}
	return append(writes, func() { _ = c.Suspend() }, func() { _ = c.Update() }, func() { _ = c.Resume() })
}

// stressCPU returns the first CPU this process may run on.
func stressCPU(t *testing.T) int {
	cpus, err := osthread.CPUs()
	require.NoError(t, err)
	require.NotEmpty(t, cpus, "no CPU in this process's affinity mask")
	return cpus[0]
}

// stressPinThread binds the calling thread (the goroutine must be locked
// to it) to one CPU, and returns how to give the thread its mask back.
// The goroutine must call it before it exits: a locked goroutine's thread
// exits with it, except the main thread, which the runtime keeps, and a
// pinned main thread would pin every goroutine later scheduled on it.
func stressPinThread(cpu int) (restore func(), err error) {
	restoreMask, err := osthread.Pin(cpu)
	if err != nil {
		return nil, err
	}
	return func() { _ = restoreMask() }, nil
}

// stressHardware returns this build's hardware counter, at a rate
// measured on one CPU, and the CPU its readers must be pinned to (-1 where
// it is trusted to be in step across CPUs), or false (and why, in the
// log) where there is none to run.
func stressHardware(t *testing.T) (Source, int, bool) {
	var read func() uint64
	name := ""
	switch {
	case tscSupported:
		read, name = tscReader(), "tsc"
	case cntvctSupported:
		read, name = cntvctReader(), "cntvct"
	default:
		t.Logf("no hardware counter case: this build has no counter assembly (%s; %s)", noAsmReason("amd64"), noAsmReason("arm64"))
		return Source{}, 0, false
	}
	cpu := -1
	if _, _, _, err := probeHardware(); err != nil {
		if !osthread.Supported {
			t.Logf("no %s case: %v, and threads cannot be pinned to one CPU on %s", name, err, runtime.GOOS)
			return Source{}, 0, false
		}
		cpu = stressCPU(t)
		t.Logf("%s case pinned to CPU %d: %v", name, cpu, err)
	}
	src := Source{Name: name, Read: read, Bits: 64}
	if name == "cntvct" {
		src.Bits, src.Rate = cntvctBits, cntfrq()&0xffff_ffff
		return src, cpu, src.Rate != 0
	}
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		var err error
		if cpu >= 0 {
			var unpin func()
			if unpin, err = stressPinThread(cpu); err == nil {
				defer unpin()
			}
		}
		if err == nil {
			var hz float64
			hz, _, err = measureRate(read, 20*time.Millisecond)
			src.Rate = uint64(hz)
		}
		done <- err
	}()
	require.NoError(t, <-done)
	return src, cpu, true
}
