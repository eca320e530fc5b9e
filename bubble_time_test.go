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
		t0 := c.Time(r0)
		time.Sleep(30 * time.Minute)
		r1 := c.Now()
		assert.Equal(t, 30*time.Minute, time.Duration(r1-r0))
		_ = c.Time(r1)
		assert.Equal(t, t0, c.Time(r0), "Time(r0) after 30 min of bubble sleep")
	})
}
