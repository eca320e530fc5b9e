package schedclock_test

import (
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
// any other counter re-aims at the wall clock every 100 ms.
func TestManualClockIsExact(t *testing.T) {
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
	time.Sleep(150 * time.Millisecond) // past a coarse tick and a wall-map period
	assert.Equal(t, at, c.Now())
	assert.Equal(t, at, c.Coarse())
	assert.Equal(t, origin.Add(time.Duration(at)), c.WallTime(at).UTC(), "Time left the wall origin")
	m.Set(m.Read() + 5)
	assert.Equal(t, at+5, c.Coarse(), "Coarse after Set")
	shifted := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	m.SetWallOrigin(shifted)
	assert.Equal(t, shifted.Add(time.Duration(at+5)), c.WallTime(c.Now()).UTC())
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
		time.Sleep(time.Hour)
		assert.Equal(t, time.Hour, time.Since(fake), "the bubble's time")
		assert.Less(t, schedclock.Since(start), time.Minute, "Now does not follow the bubble")

		m := mustManual(1e9, 64)
		c, err := schedclock.New(m.Source())
		require.NoError(t, err)
		t0 := c.Now()
		time.Sleep(time.Hour)
		m.Advance(time.Hour)
		assert.Equal(t, time.Hour, c.Since(t0))
		require.NoError(t, c.Close()) // its goroutine must leave the bubble
	})
}
