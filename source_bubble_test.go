package schedclock_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
)

// TestTimeOfAReadingNeverChanges: a Clock on a Source that reads the
// testing/synctest bubble's clock (built by hand here, as a user would)
// runs 30 minutes of bubble time while the real wall clock moves by
// milliseconds: the wall time of a reading taken at the start must not
// move.
func TestTimeOfAReadingNeverChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		c, err := schedclock.New(schedclock.Source{
			Name: "by hand", Bits: 64, Rate: 1e9,
			Read: func() uint64 { return uint64(time.Since(start)) },
		})
		require.NoError(t, err)
		defer c.Close()
		r0 := c.Now()
		t0 := c.WallTime(r0)
		time.Sleep(30 * time.Minute)
		r1 := c.Now()
		assert.Equal(t, 30*time.Minute, time.Duration(r1-r0))
		_ = c.WallTime(r1)
		assert.Equal(t, t0, c.WallTime(r0), "Time(r0) after 30 min of bubble sleep")
	})
}

// TestBubbleSource: a Clock on Bubble follows the bubble's fake time
// exactly, Since and Time alike: Time(Now()) is the bubble's time.Now,
// and a reading's Time stays what it was. Outside a bubble it follows
// the real time.
func TestBubbleSource(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, err := schedclock.New(schedclock.Bubble())
		require.NoError(t, err)
		defer c.Close()
		assert.Equal(t, "bubble (time.Now)", c.Info().Source)
		r0 := c.Now()
		t0 := c.WallTime(r0)
		assert.True(t, time.Now().Equal(t0), "Time(Now()) %v, the bubble's time.Now %v", t0, time.Now())
		time.Sleep(30 * time.Minute)
		assert.Equal(t, 30*time.Minute, c.Since(r0))
		assert.True(t, time.Now().Equal(c.WallTime(c.Now())), "after 30 min")
		assert.Equal(t, t0, c.WallTime(r0), "Time(r0) after 30 min of bubble sleep")
	})
	c, err := schedclock.New(schedclock.Bubble())
	require.NoError(t, err)
	defer c.Close()
	start, realStart := c.Now(), time.Now()
	time.Sleep(20 * time.Millisecond)
	moved, real := time.Duration(c.Now()-start), time.Since(realStart)
	assert.InDelta(t, float64(real), float64(moved), float64(real)/10+float64(time.Millisecond), "outside a bubble: real time")
}
