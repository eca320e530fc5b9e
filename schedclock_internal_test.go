package schedclock

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Update's fold (schedclock.go) from inside: the epoch it stores, and
// the wraps it adds back when it comes late. Each test fails when its
// safeguard is removed (tools/mutants applies the removals).

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
	c.st.mu.Lock()
	cur := c.st.cur
	c.unlock()
	bank := c.latch.snapshot()
	assert.Equal(t, uint64(1234), cur.epochCyc, "the line's epoch")
	assert.Equal(t, uint64(1234), bank[1], "the published bank's epoch")
	want := referenceNanos(cur, 7<<16|1300)
	counter.Set(7<<16 | 1300)
	assert.Equal(t, want, c.nanos())
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
			wrap := c.st.conv.wrap()
			moved := uint64(tc.age * (1 << 16))
			if tc.counts != 0 {
				moved = tc.counts
			}
			counter.Set(moved & 0xffff)
			c.st.mu.Lock()
			c.st.fold.lastMono = runtimeNano() - int64(tc.age*float64(wrap))
			c.unlock()
			require.NoError(t, c.Update())
			want := int64(moved)
			if tc.want >= 0 {
				want = tc.want
			}
			wantNs := int64(c.st.conv.nanos(uint64(want)))
			assert.InDelta(t, wantNs, c.nanos(), 1, "the fold is %v wraps late", tc.age)
			assert.Equal(t, int(tc.lost), c.Info().LostWraps)
		})
	}
}

// TestOwnCode: the package's counters, a Manual's and a Jiffies' Read
// and the default clock's reference are its own code, which never calls
// a writer method; another package's function is user code, whose
// writers name themselves (see lockAsWriter). Goroutine IDs tell two
// goroutines apart.
func TestOwnCode(t *testing.T) {
	j, err := NewJiffies(100)
	assert.NoError(t, err)
	m, err := newManual(1e9, 64)
	assert.NoError(t, err)
	defer j.Stop()
	for name, f := range map[string]func() uint64{
		"Portable": Portable().Read, "Manual": m.Source().Read,
		"Jiffies": j.Source().Read, "Bubble": Bubble().Read, "nil": nil,
	} {
		assert.True(t, ownCode(f), name)
	}
	assert.True(t, ownCode(rawNow), "rawNow")
	// (A closure of this file is the package's own code: the external
	// tests' closures, TestAReadReenteringTheWriter's, are user code.)
	assert.False(t, ownCode(rand.Uint64), "a function of another package")
	assert.False(t, ownCode(time.Now().UnixNano), "a method value of another package")
	assert.NotZero(t, goroutineID())
	other := make(chan uint64)
	go func() { other <- goroutineID() }()
	assert.NotEqual(t, goroutineID(), <-other)
}
