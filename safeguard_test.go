package schedclock

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The deterministic tests of the read path's logical safeguards, each
// written to fail when its safeguard is removed (tools/mutants applies the
// removals): the fast path's window edge, the freezer's clamp, the mask
// of the epoch, the Go reader's re-check. The ordering safeguards are in
// ordering_test.go.

// publishLine makes ln the clock's line, as a writer would.
func publishLine(c *Clock, ln line) {
	c.mu.Lock()
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
					assert.Equal(t, want, c.Now(), "Now: %d bits, %d Hz, delta window%+d, frac %d", bits, rate, int64(delta-window), frac)
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

// TestPinClampsACounterBelowTheEpoch: the freezer pins a counter read
// below the frozen line's epoch (skew between CPUs, a counter that stepped
// back) as readers read it, at the epoch.
func TestPinClampsACounterBelowTheEpoch(t *testing.T) {
	// A rate refinement anchors the new line at the pinned value itself.
	// Pinned at the real (lower) counter value, the anchor would lie off
	// the old line, and time would jump forward by the step back.
	t.Run("same-counter switch", func(t *testing.T) {
		counter := &FakeCounter{}
		counter.Set(1_000_000)
		src := counter.Source("c", 64, 1_000_000_000)
		c, err := New(src)
		require.NoError(t, err)
		defer c.Close()
		counter.Add(1000)
		c.Update()
		atEpoch := c.Now()
		counter.StepBack(500)
		require.Equal(t, atEpoch, c.Now(), "a counter below the epoch reads as the epoch")
		refined := src // the same Read: a new rate for the same counter
		refined.Rate = 2_000_000_000
		require.NoError(t, c.Register(refined))
		assert.Equal(t, atEpoch, c.Now())
		counter.Add(500) // back at the old epoch: both lines must read the same there
		assert.Equal(t, atEpoch, c.Now(), "the switch moved time")
		counter.Add(100)
		assert.Equal(t, atEpoch+50, c.Now(), "100 counts at 2 GHz")
	})
	// One count below a 64-bit epoch is the delta 2^64-1; unclamped, the
	// pin would store 1+delta = 0, which means "not pinned", and later
	// readers would pin again, later than the value the writer froze at.
	t.Run("one count below a 64-bit epoch", func(t *testing.T) {
		counter, next := &FakeCounter{}, &FakeCounter{}
		counter.Set(1_000_000)
		next.Set(5)
		c, err := New(counter.Source("c", 64, 1_000_000_000))
		require.NoError(t, err)
		defer c.Close()
		c.Update()
		frozenAt := c.Now()
		counter.StepBack(1)
		var readerSaw int64
		hooked := false
		SetStep(c, func(step string) {
			if step == "switch.fixed" {
				hooked = true
				counter.Add(1001) // time goes on while the writer is stopped here
				readerSaw = c.Now()
			}
		})
		require.NoError(t, c.Register(next.Source("next", 64, 2_000_000_000)))
		SetStep(c, nil)
		require.True(t, hooked, "the writer never stopped at switch.fixed: update this test")
		assert.Equal(t, frozenAt, readerSaw, "a reader of the frozen line must read the value it froze at")
		assert.GreaterOrEqual(t, c.Now(), readerSaw, "time went back across the switch")
	})
}

// TestUpdateMasksTheEpoch: Update keeps the line's epoch within the
// counter's width when the counter sets bits above it (latch.go documents
// bank.epochCyc as masked). No reading depends on it today: every reader
// either masks the delta or takes the fast path only for deltas below the
// mask, where masking changes nothing. The test keeps the documented
// representation, which the freezer and the switch protocol read.
func TestUpdateMasksTheEpoch(t *testing.T) {
	counter := &FakeCounter{}
	c, err := New(counter.Source("c", 16, 62_500))
	require.NoError(t, err)
	defer c.Close()
	counter.Set(7<<16 | 1234) // bits above the counter's 16
	c.Update()
	c.mu.Lock()
	cur := c.cur
	c.unlock()
	bank := c.latch.snapshot()
	assert.Equal(t, uint64(1234), cur.epochCyc, "the line's epoch")
	assert.Equal(t, uint64(1234), bank[1], "the published bank's epoch")
	want := referenceNanos(cur, 7<<16|1300)
	counter.Set(7<<16 | 1300)
	assert.Equal(t, want, c.Now())
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
	lineB := line{read: b.Read, conv: c.cur.conv, epochCyc: 5_000_000, epochNs: 1 << 40}
	published := false
	ln := c.cur
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

// TestAFoldLateByWholeWrapsAddsThemBack: a narrow counter whose fold
// comes more than a wrap period late (here no goroutine folds it at all,
// as when a non-preemptible stretch holds every P) has lost whole wraps
// that its masked delta cannot show; the next fold finds them with the
// runtime's monotonic clock, adds them back and counts them.
func TestAFoldLateByWholeWrapsAddsThemBack(t *testing.T) {
	const rate = 98_000 // 16 bits wrap every 669 ms: the narrowest accepted
	start := runtimeNano()
	read := func() uint64 { return uint64(runtimeNano()-start) * rate / 1e9 & 0xffff }
	// newClock starts no goroutine: only this test folds.
	c, err := newClock(Source{Name: "narrow", Read: read, Bits: 16, Rate: rate}, rating{hz: rate}, nil)
	require.NoError(t, err)
	wrap := c.conv.wrap()
	t0, n0 := runtimeNano(), c.Now()
	for time.Duration(runtimeNano()-t0) < 2*wrap+wrap/2 {
		time.Sleep(wrap / 4)
	}
	before := time.Duration(runtimeNano() - t0)
	require.NoError(t, c.Update())
	elapsed, got := time.Duration(runtimeNano()-t0), time.Duration(c.Now()-n0)
	// The counter counts in 10 µs steps and the fold reads it a little
	// before elapsed is taken.
	assert.InDelta(t, float64(elapsed), float64(got), float64(time.Millisecond),
		"%v passed, the clock moved %v: wraps of %v were lost", elapsed, got, wrap)
	lost := c.Info().LostWraps
	assert.Contains(t, []int{int(before / wrap), int(elapsed / wrap)}, lost, "wraps counted")
	// A fold on time adds nothing.
	require.NoError(t, c.Update())
	assert.Equal(t, lost, c.Info().LostWraps)
}

// TestLateFoldsAreExact folds a 16-bit counter that followed its rate for
// every age of the last fold, in wraps, against the runtime's clock: on
// time, late into the top eighth of a wrap (a delta readers clamp, which
// the fold must take for the progress it is), and whole wraps late. The
// fold must land exactly where the counter is, and count the wraps it
// added. A counter that stepped back just after a fold, or that stopped,
// is not second-guessed.
func TestLateFoldsAreExact(t *testing.T) {
	const rate = 98_000
	counter := &FakeCounter{}
	for _, tc := range []struct {
		age        float64 // of the last fold, in wraps
		counts     uint64  // counter moved, 0: age × the wrap's counts
		want, lost int64   // want in counts, -1: age × the wrap's counts
	}{
		{age: 0.1, want: -1}, {age: 0.8, want: -1}, {age: 0.9, want: -1}, {age: 0.95, want: -1},
		{age: 1.05, want: -1, lost: 1}, {age: 1.5, want: -1, lost: 1}, {age: 1.9, want: -1, lost: 1},
		{age: 1.95, want: -1, lost: 1}, {age: 2.05, want: -1, lost: 2}, {age: 3.3, want: -1, lost: 3},
		// Stepped back by 100 counts just after a fold: readers' clamp.
		{age: 0.01, counts: 1<<16 - 100, want: 0},
		// Stopped for most of a wrap: nothing to add.
		{age: 0.95, counts: 1<<16 + 0, want: 0},
	} {
		t.Run(fmt.Sprintf("%v wraps, %d counts", tc.age, tc.counts), func(t *testing.T) {
			counter.Set(0)
			c, err := newClock(counter.Source("n16", 16, rate), rating{hz: rate}, nil)
			require.NoError(t, err)
			wrap := c.conv.wrap()
			moved := uint64(tc.age * (1 << 16))
			if tc.counts != 0 {
				moved = tc.counts
			}
			counter.Set(moved & 0xffff)
			c.mu.Lock()
			c.fold.lastMono = runtimeNano() - int64(tc.age*float64(wrap))
			c.unlock()
			require.NoError(t, c.Update())
			want := int64(moved)
			if tc.want >= 0 {
				want = tc.want
			}
			wantNs := int64(c.conv.nanos(uint64(want)))
			assert.InDelta(t, wantNs, c.Now(), 1, "the fold is %v wraps late", tc.age)
			assert.Equal(t, int(tc.lost), c.Info().LostWraps)
		})
	}
}

// TestASwitchRestartsTheFoldClock: the first fold after a Register onto
// a narrow counter measures its lateness from the switch, not from the
// old source's last fold: an old source idle for three wraps of the new
// one adds no wrap to it.
func TestASwitchRestartsTheFoldClock(t *testing.T) {
	old := &FakeCounter{}
	c, err := newClock(old.Source("wide", 64, 1000), rating{hz: 1000}, nil)
	require.NoError(t, err)
	narrow := &FakeCounter{}
	src := narrow.Source("n16", 16, 98_000)
	conv, err := newConversion(src)
	require.NoError(t, err)
	c.mu.Lock()
	c.fold.lastMono = runtimeNano() - int64(3*conv.wrap()) // the old line, folded three wraps ago
	c.unlock()
	require.NoError(t, c.Register(src))
	before := c.Now()
	narrow.Add(1000)
	require.NoError(t, c.Update())
	assert.Equal(t, int64(conv.nanos(1000)), c.Now()-before, "the new counter moved 1000 counts")
	assert.Zero(t, c.Info().LostWraps)
}
