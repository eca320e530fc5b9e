package schedclock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
)

// TestManualIsExactAtEveryWidth: a narrow Manual counter wraps many times
// over, in one Advance and across many, and the Clock on it still moves
// by exactly what Advance moved: Advance folds the clocks that run on it
// as it goes, so no wrap is lost, whatever the background goroutine does.
func TestManualIsExactAtEveryWidth(t *testing.T) {
	for _, width := range []int{32, 40, 48, 63, 64} {
		m := mustManual(1e9, width)
		c, err := schedclock.New(m.Source())
		require.NoError(t, err)
		start := c.Now()
		for range 10 {
			m.Advance(time.Second)
		}
		assert.Equal(t, 10*time.Second, c.Since(start), "%d bits: ten Advance(1s)", width)
		m.Advance(100 * time.Hour) // tens of thousands of wraps of 32 bits in one call
		assert.Equal(t, 100*time.Hour+10*time.Second, c.Since(start), "%d bits: Advance(100h)", width)
		for range 1000 {
			m.Advance(time.Millisecond)
		}
		assert.Equal(t, 100*time.Hour+11*time.Second, c.Since(start), "%d bits: a thousand Advance(1ms)", width)
		assert.Zero(t, c.Info().LostWraps, "%d bits: Advance lost no wrap", width)
		require.NoError(t, c.Close())
	}
}

// TestManualFoldsEveryClockOnIt: two clocks on one 16-bit counter, one
// made later, both exact; a closed one is left alone.
func TestManualFoldsEveryClockOnIt(t *testing.T) {
	m := mustManual(65536, 16)
	a, err := schedclock.New(m.Source())
	require.NoError(t, err)
	defer a.Close()
	m.Advance(3 * time.Second)
	b, err := schedclock.New(m.Source())
	require.NoError(t, err)
	closed, err := schedclock.New(m.Source())
	require.NoError(t, err)
	require.NoError(t, closed.Close())
	bStart := b.Now()
	m.Advance(time.Minute)
	assert.Equal(t, time.Minute+3*time.Second, time.Duration(a.Now()))
	assert.Equal(t, time.Minute, b.Since(bStart))
	// A Set between Advances is folded before the next move: its counts
	// are kept, and the move's added to them.
	at := a.Now()
	m.Set(m.Read() + 32768) // half a second of counts
	m.Advance(5 * time.Second)
	assert.Equal(t, 5500*time.Millisecond, a.Since(at))
	require.NoError(t, b.Close())
}
