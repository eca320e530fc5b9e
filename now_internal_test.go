package schedclock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The read path (now.go, now_amd64.{go,s}, now_other.go) from inside:
// the assembly and the Go reader against each other and against lines
// published by hand. now_test.go has what the public API can show.

// The read path's logical safeguards are tested here deterministically,
// each test written to fail when its safeguard is removed (tools/mutants
// applies the removals): the fast path's window edge, the Go reader's
// re-check of seq. The ordering safeguards are in ordering_test.go.

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
	c.mu.Lock()
	ln := c.cur
	ln.epochCyc = hw.Read() + uint64(hw.Rate)*1000
	ln.epochNs = 1234
	c.publishLocked(ln)
	c.unlock()
	assert.Equal(t, int64(1234), c.nanos())
	assert.Equal(t, int64(1234), c.now())

	c.mu.Lock()
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
