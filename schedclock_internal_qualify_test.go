package schedclock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/testenv"
)

// TestAFoldLateByWholeWrapsAddsThemBack: a narrow counter whose fold
// comes more than a wrap period late (here no goroutine folds it at all,
// as when a non-preemptible stretch holds every P) has lost whole wraps
// that its masked delta cannot show; the next fold finds them with the
// runtime's monotonic clock, adds them back and counts them. The
// qualification layer's: the runtime's clock is real time, 1.7 s of it
// (TestLateFoldsAreExact folds the same by hand).
func TestAFoldLateByWholeWrapsAddsThemBack(t *testing.T) {
	testenv.Qualify(t)
	const rate = 98_000 // 16 bits wrap every 669 ms: the narrowest accepted
	start := runtimeNano()
	read := func() uint64 { return uint64(runtimeNano()-start) * rate / 1e9 & 0xffff }
	// newClock starts no goroutine: only this test folds.
	c, err := newClock(Source{Name: "narrow", Read: read, Bits: 16, Rate: rate}, rating{hz: rate}, nil)
	require.NoError(t, err)
	wrap := c.st.conv.wrap()
	t0, n0 := runtimeNano(), c.nanos()
	for time.Duration(runtimeNano()-t0) < 2*wrap+wrap/2 {
		time.Sleep(wrap / 4)
	}
	before := time.Duration(runtimeNano() - t0)
	require.NoError(t, c.Update())
	elapsed, got := time.Duration(runtimeNano()-t0), time.Duration(c.nanos()-n0)
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
