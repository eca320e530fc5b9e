package schedclock_test

import (
	"math"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/schedclocktest"
)

func TestManual(t *testing.T) {
	m := mustManual(24_000_000, 32)
	c, err := schedclock.New(m.Source())
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, "manual", c.Info().Source)
	m.Advance(1500 * time.Millisecond)
	assert.Equal(t, uint64(36_000_000), m.Read())
	assert.InDelta(t, float64(1500*time.Millisecond), float64(c.Now()), 1)
	// Fractions of a count are carried: 1 ns at 24 MHz is 0.024 counts.
	for i := 0; i < 1000; i++ {
		m.Advance(time.Nanosecond)
	}
	assert.Equal(t, uint64(36_000_024), m.Read())
	m.Advance(-time.Second)
	assert.Equal(t, uint64(36_000_024), m.Read(), "a negative Advance does nothing")
	// Set wraps to the width, as the counter would.
	m.Set(1<<32 + 5)
	assert.Equal(t, uint64(5), m.Read())

	// Bad parameters are refused where they are given, as New would
	// refuse them.
	_, err = schedclocktest.NewManual(0, 64)
	assert.ErrorIs(t, err, schedclock.ErrInvalidSource)
	_, err = schedclocktest.NewManual(1e9, 65)
	assert.ErrorIs(t, err, schedclock.ErrInvalidSource)
	_, err = schedclocktest.NewManual(1e6, 16) // wraps every 65 ms
	assert.ErrorIs(t, err, schedclock.ErrInvalidSource)
}

// mustManual is NewManual for a rate and width the test knows are valid.
func mustManual(rate uint64, bits int) *schedclocktest.Manual {
	m, err := schedclocktest.NewManual(rate, bits)
	if err != nil {
		panic(err)
	}
	return m
}

// TestManualClockIsExact: a clock on a Manual answers only from the
// counter. Coarse is Now's value at once after every Advance and Set, and
// Time(Now()) moves by exactly what Advance moved, from the fixed wall
// origin or the one SetWallOrigin gives. Real time passing changes
// nothing: not Coarse's ticker, and not the wall map, which a clock on
// any other counter re-aims at the wall clock every 100 ms. (In a
// testing/synctest bubble, whose 150 ms pass at once, for the clock's
// goroutines too.)
func TestManualClockIsExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, m := schedclocktest.NewManualClock(t)
		origin := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
		assert.Equal(t, origin, c.WallTime(c.Now()).UTC(), "the default wall origin")
		for i := 1; i <= 2000; i++ {
			before := c.WallTime(c.Now())
			m.Advance(time.Duration(i) * time.Microsecond)
			require.Equal(t, c.Now(), c.Coarse(), "Coarse after Advance %d", i)
			require.Equal(t, time.Duration(i)*time.Microsecond, c.WallTime(c.Now()).Sub(before), "Time after Advance %d", i)
		}
		m.Advance(time.Hour)
		at := c.Now()
		bubbleSleep(150 * time.Millisecond) // past a coarse tick and a wall-map period
		assert.Equal(t, at, c.Now())
		assert.Equal(t, at, c.Coarse())
		assert.Equal(t, origin.Add(time.Duration(at)), c.WallTime(at).UTC(), "Time left the wall origin")
		m.Set(m.Read() + 5)
		assert.Equal(t, at+5, c.Coarse(), "Coarse after Set")
		shifted := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
		m.SetWallOrigin(shifted)
		assert.Equal(t, shifted.Add(time.Duration(at+5)), c.WallTime(c.Now()).UTC())
	})
}

func TestManualIsSafeForConcurrentUse(t *testing.T) {
	m := mustManual(3_000_000_000, 64)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				m.Advance(time.Nanosecond / 3 * 2) // 0 ns: nothing
				m.Advance(time.Microsecond)
				_ = m.Read()
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, uint64(4*1000*3000), m.Read())
}

// Inside a testing/synctest bubble, time.Sleep returns at once with the
// bubble's fake time advanced, but Now follows the machine's counter:
// it sees only the real time that passed. Code that must follow the
// bubble's time should take a *Clock and be given one on a Manual
// counter, advanced with the fake time.
func TestNowInASynctestBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start, fake := schedclock.Now(), time.Now()
		bubbleSleep(time.Hour)
		assert.Equal(t, time.Hour, time.Since(fake), "the bubble's time")
		assert.Less(t, schedclock.Since(start), time.Minute, "Now does not follow the bubble")

		m := mustManual(1e9, 64)
		c, err := schedclock.New(m.Source())
		require.NoError(t, err)
		t0 := c.Now()
		bubbleSleep(time.Hour)
		m.Advance(time.Hour)
		assert.Equal(t, time.Hour, c.Since(t0))
		require.NoError(t, c.Close()) // its goroutine must leave the bubble
	})
}

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

// TestAClosedManualClockStandsStill: a Clock on a Manual counter, once
// closed, does not follow the counter (Manual.Advance's doc): Now,
// Since and Coarse stand at the reading Close left, however far Advance
// and Set move the counter, on a 64-bit counter and on a narrow one,
// whose unfolded wraps would otherwise read as a step back. Advance
// and Set on it neither panic nor touch the clocks still open.
func TestAClosedManualClockStandsStill(t *testing.T) {
	for _, width := range []int{64, 32} {
		t.Run(strconv.Itoa(width)+" bits", func(t *testing.T) {
			m := mustManual(1e9, width)
			c, err := schedclock.New(m.Source())
			require.NoError(t, err)
			open, err := schedclock.New(m.Source())
			require.NoError(t, err)
			defer open.Close()
			m.Advance(time.Second)
			require.NoError(t, c.Close())
			at, coarseAt := c.Now(), c.Coarse()
			require.Equal(t, schedclock.Instant(time.Second), at)
			for _, d := range []time.Duration{time.Second, 2 * time.Second, 500 * time.Millisecond, time.Minute} {
				m.Advance(d)
				assert.Equal(t, at, c.Now(), "a closed clock followed Advance(%v)", d)
				assert.Equal(t, coarseAt, c.Coarse(), "Coarse of a closed clock moved")
			}
			// The open clock on the same counter follows it exactly.
			assert.Equal(t, schedclock.Instant(4500*time.Millisecond+time.Minute), open.Now())
			m.Set(0)
			assert.Equal(t, at, c.Now(), "a closed clock followed Set")
			assert.Equal(t, time.Duration(0), c.Since(at))
			assert.True(t, c.Info().Closed)
		})
	}
}
