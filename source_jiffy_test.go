package schedclock_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
)

// The jiffy counter (source_jiffy.go): refused rates, its ticking at HZ
// in a synctest bubble (whose clock and ticker are the bubble's, so the
// counts are exact), a Clock on it advancing in steps of 1/HZ, and that
// a stopped counter stands still.

func TestNewJiffiesRefusesARateOutsideItsRange(t *testing.T) {
	for _, hz := range []int{0, -1, schedclock.MaxHZ + 1, int(^uint(0) >> 1)} {
		j, err := schedclock.NewJiffies(hz)
		assert.Nil(t, j, "HZ = %d", hz)
		assert.ErrorIs(t, err, schedclock.ErrInvalidSource, "HZ = %d", hz)
		assert.EqualError(t, err, fmt.Sprintf(`schedclock: invalid source "jiffies": HZ = %d, want 1..%d`, hz, schedclock.MaxHZ))
	}
	for _, hz := range []int{1, schedclock.MaxHZ} {
		synctest.Test(t, func(t *testing.T) {
			j, err := schedclock.NewJiffies(hz)
			require.NoError(t, err, "HZ = %d", hz)
			defer j.Stop()
			assert.Equal(t, uint64(hz), j.Source().Rate)
		})
	}
}

// TestJiffiesTickAtHZ: a 1000 Hz counter reads 0 at once and counts one
// per millisecond of the bubble's time, whole ticks only.
func TestJiffiesTickAtHZ(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j, err := schedclock.NewJiffies(1000)
		require.NoError(t, err)
		defer j.Stop()
		assert.Zero(t, j.Read(), "before the first tick")
		src := j.Source()
		assert.Equal(t, "jiffies", src.Name)
		assert.Equal(t, 64, src.Bits)
		assert.Equal(t, uint64(1000), src.Rate)
		for _, at := range []struct {
			sleep time.Duration
			want  uint64
		}{{time.Millisecond, 1}, {1500 * time.Microsecond, 2}, {500 * time.Microsecond, 3}, {27 * time.Millisecond, 30}, {time.Second, 1030}} {
			bubbleSleep(at.sleep)
			synctest.Wait() // the ticker's goroutine has stored the tick
			assert.Equal(t, at.want, j.Read(), "after %v more", at.sleep)
			assert.Equal(t, at.want, src.Read(), "the Source's Read is the counter's")
		}
	})
}

// TestAClockOnJiffiesAdvancesInTicks: a Clock on a 100 Hz counter reads
// whole multiples of 10 ms, and moves by exactly the bubble's time at
// each tick.
func TestAClockOnJiffiesAdvancesInTicks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j, err := schedclock.NewJiffies(100)
		require.NoError(t, err)
		defer j.Stop()
		c, err := schedclock.New(j.Source())
		require.NoError(t, err)
		defer c.Close()
		start := c.Now()
		bubbleSleep(25 * time.Millisecond)
		synctest.Wait()
		assert.Equal(t, 20*time.Millisecond, c.Since(start), "two ticks in 25 ms")
		bubbleSleep(5 * time.Millisecond)
		synctest.Wait()
		assert.Equal(t, 30*time.Millisecond, c.Since(start), "the third tick")
		bubbleSleep(time.Minute)
		synctest.Wait()
		assert.Equal(t, time.Minute+30*time.Millisecond, c.Since(start), "a minute on")
	})
}

// TestStoppedJiffiesStandStill: Stop waits for the ticker's goroutine
// (the bubble would not end with it running), the count stays where it
// was, and Stop is idempotent.
func TestStoppedJiffiesStandStill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j, err := schedclock.NewJiffies(1000)
		require.NoError(t, err)
		bubbleSleep(30 * time.Millisecond)
		synctest.Wait()
		j.Stop()
		assert.Equal(t, uint64(30), j.Read())
		bubbleSleep(time.Second)
		synctest.Wait()
		assert.Equal(t, uint64(30), j.Read(), "a stopped counter moved")
		j.Stop()
		assert.Equal(t, uint64(30), j.Source().Read())
	})
}

// TestJiffiesOutsideABubble: on the real clock the counter ticks too,
// and never counts ahead of the time since it started: each tick sets
// the count from Go's monotonic clock.
func TestJiffiesOutsideABubble(t *testing.T) {
	start := time.Now()
	j, err := schedclock.NewJiffies(1000)
	require.NoError(t, err)
	defer j.Stop()
	for j.Read() == 0 { // go test's -timeout bounds a counter that never ticks
		time.Sleep(100 * time.Microsecond)
	}
	time.Sleep(2 * time.Millisecond)
	n := j.Read()
	elapsed := time.Since(start)
	assert.LessOrEqual(t, n, uint64(elapsed/time.Millisecond), "%d ticks of 1 ms in %v", n, elapsed)
}
