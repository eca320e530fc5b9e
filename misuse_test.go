package schedclock_test

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/schedclocktest"
)

// TestSetWallOriginOutsideTimeUnix: a wall origin that time.Unix(0, ns)
// cannot say (before 1677-09-21 or after 2262-04-11) is neither wrapped
// nor read back as another century: Time saturates at the end it passed,
// as SetWallOrigin's doc says, and an origin out there with a reading
// that brings it back in range maps exactly (1600 plus 100 years is
// 1700, not 1777).
func TestSetWallOriginOutsideTimeUnix(t *testing.T) {
	earliest, latest := time.Unix(0, math.MinInt64), time.Unix(0, math.MaxInt64)
	c, m := schedclocktest.NewManualClock(t)

	m.SetWallOrigin(time.Time{})
	assert.True(t, c.WallTime(0).Equal(earliest), "origin year 1: Time(0) = %v, want %v", c.WallTime(0), earliest)
	m.SetWallOrigin(time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC))
	assert.True(t, c.WallTime(0).Equal(latest), "origin year 9999: Time(0) = %v, want %v", c.WallTime(0), latest)
	assert.True(t, c.WallTime(math.MinInt64).Equal(latest), "Time(MinInt64) = %v", c.WallTime(math.MinInt64))

	origin := time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC)
	m.SetWallOrigin(origin)
	assert.True(t, c.WallTime(0).Equal(earliest), "origin 1600: Time(0) = %v", c.WallTime(0))
	const century = 100 * 365 * 24 * time.Hour
	m.Advance(century)
	want := origin.Add(century)
	assert.True(t, c.WallTime(c.Now()).Equal(want), "origin 1600 plus %v: Time = %v, want %v", century, c.WallTime(c.Now()), want)
	// Readings keep their order through the saturation.
	assert.False(t, c.WallTime(c.Now()).Before(c.WallTime(0)))
}

// TestNilManualAndJiffies: a nil *Manual and a nil *Jiffies behave as a
// nil *Clock does: no method panics, Read reads 0, Advance, Set,
// SetWallOrigin and Stop do nothing, and New refuses their Source with
// ErrInvalidSource.
func TestNilManualAndJiffies(t *testing.T) {
	var m *schedclocktest.Manual
	require.NotPanics(t, func() {
		m.Advance(time.Second)
		m.Set(5)
		m.SetWallOrigin(time.Now())
		assert.Zero(t, m.Read())
		_, err := schedclock.New(m.Source())
		assert.ErrorIs(t, err, schedclock.ErrInvalidSource)
	})
	var j *schedclock.Jiffies
	require.NotPanics(t, func() {
		j.Stop()
		assert.Zero(t, j.Read())
		_, err := schedclock.New(j.Source())
		assert.ErrorIs(t, err, schedclock.ErrInvalidSource)
	})
}

// TestRefusedRatesAreQuotedExactly: an error that quotes a declared
// rate quotes it to the hertz (math.MaxUint64 once read
// 18446744073709551616 Hz, float64's rounding).
func TestRefusedRatesAreQuotedExactly(t *testing.T) {
	read := func() uint64 { return 0 }
	for _, rate := range []uint64{math.MaxUint64, math.MaxUint64 - 1024, 1<<63 + 1} {
		_, err := schedclock.New(schedclock.Source{Name: "fast", Read: read, Bits: 64, Rate: rate})
		require.ErrorIs(t, err, schedclock.ErrInvalidSource)
		assert.Contains(t, err.Error(), " "+strconv.FormatUint(rate, 10)+" Hz")
	}
}
