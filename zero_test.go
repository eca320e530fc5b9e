package schedclock_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
)

// TestNilAndZeroClocks: a nil *Clock and a zero Clock{} never panic: they
// read 0, have no wall time (Time returns the zero time.Time), and every
// writer refuses with ErrClosed, as the docs say.
func TestNilAndZeroClocks(t *testing.T) {
	for name, c := range map[string]*schedclock.Clock{"nil": nil, "zero": {}} {
		t.Run(name, func(t *testing.T) {
			require.NotPanics(t, func() {
				assert.Zero(t, c.Now())
				assert.Zero(t, c.Since(0))
				assert.Zero(t, c.Coarse())
				assert.True(t, c.WallTime(0).IsZero(), "Time(0) = %v", c.WallTime(0))
				assert.True(t, c.WallTime(c.Now()).IsZero())
				assert.True(t, c.Info().Closed)
				assert.ErrorIs(t, c.Update(), schedclock.ErrClosed)
				assert.ErrorIs(t, c.Suspend(), schedclock.ErrClosed)
				assert.ErrorIs(t, c.Resume(), schedclock.ErrClosed)
				assert.ErrorIs(t, c.Register(schedclock.Portable()), schedclock.ErrClosed)
				assert.ErrorIs(t, c.Close(), schedclock.ErrClosed)
			})
		})
	}
}

// TestTimeAtItsEdges: readings before the clock's start (which no Now of
// it returns) map through its first segment, Time(math.MinInt64) about
// 292 years before the start, as Time's doc says; the largest saturates
// in 2262. Every one keeps the map's order.
func TestTimeAtItsEdges(t *testing.T) {
	c, err := schedclock.New(schedclock.Portable())
	require.NoError(t, err)
	defer c.Close()
	now := c.Now()
	at := c.WallTime(now)
	assert.True(t, c.WallTime(-1).Before(c.WallTime(0)))
	assert.True(t, c.WallTime(0).Before(at) || c.WallTime(0).Equal(at))
	// Time(0) + math.MinInt64, to within the reading the first pairing
	// took (where the subtraction saturates).
	assert.InDelta(t, c.WallTime(0).UnixNano()+math.MinInt64, c.WallTime(math.MinInt64).UnixNano(), float64(c.Now()))
	// The largest reading maps through the last segment's slope: where
	// the wall clock runs faster than the clock it saturates, in 2262;
	// where slower (the slope a pairing under qemu-ppc64le measured was
	// some tens of ppm negative: a week short of 2262-04-11), it falls
	// short by that rate alone.
	maxAt := c.WallTime(math.MaxInt64)
	assert.InEpsilon(t, float64(math.MaxInt64), float64(maxAt.UnixNano()), 1e-3, "%v", maxAt)
	assert.False(t, maxAt.Before(c.WallTime(math.MaxInt64-1)))
	assert.True(t, c.WallTime(math.MinInt64+1).After(c.WallTime(math.MinInt64)) || c.WallTime(math.MinInt64+1).Equal(c.WallTime(math.MinInt64)))
}

// TestAClosedClockSaturates: a closed 1 GHz clock, no longer folded,
// whose counter jumps 300 years in one step (past math.MaxInt64 ns, and
// short of the negative zone at 7/8 of the range) reads
// math.MaxInt64, not 0 nor a wrapped value.
func TestAClosedClockSaturates(t *testing.T) {
	m := mustManual(1e9, 64)
	c, err := schedclock.New(m.Source())
	require.NoError(t, err)
	require.NoError(t, c.Close())
	const threeHundredYears = 300 * 365.25 * 24 * 3600 * 1e9
	m.Set(uint64(threeHundredYears))
	assert.Equal(t, schedclock.Instant(math.MaxInt64), c.Now())
	assert.Equal(t, time.Duration(math.MaxInt64), c.Since(0))
}
