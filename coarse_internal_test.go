package schedclock

import (
	"errors"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCoarseTickerStartsAtOnce: on the default clock, whose background
// work waits firstUseGrace after the first use, Coarse's ticker starts at
// once: from a first use that is a Coarse, and from a Coarse during the
// grace. In a testing/synctest bubble (a default-like clock on the
// portable source, made there), so that it is a matter of the schedule,
// not of how busy this machine is: the value must have been refreshed one
// resolution after the first Coarse.
func TestCoarseTickerStartsAtOnce(t *testing.T) {
	noCounter := func() (Source, RateOrigin, float64, error) { return Source{}, 0, 0, errors.New("none here") }
	for _, firstUse := range []string{"Coarse", "Now"} {
		t.Run("first use "+firstUse, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newDefaultClock([]*counter{{arch: runtime.GOARCH, probe: noCounter}})
				defer func() { require.NoError(t, c.Close()) }()
				if firstUse == "Now" {
					c.Now()
					time.Sleep(firstUseGrace / 5)
				}
				stored := c.Coarse()
				time.Sleep(c.coarseEvery + 1)
				assert.NotEqual(t, stored, c.Coarse(), "Coarse not refreshed one resolution after its first call")
			})
		})
	}
}
