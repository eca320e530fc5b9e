package schedclock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
)

// The jiffy counter (source_jiffy.go): refused rates, its ticking, and
// that a stopped counter stands still.

func TestJiffies(t *testing.T) {
	_, err := schedclock.NewJiffies(0)
	assert.ErrorIs(t, err, schedclock.ErrInvalidSource)
	_, err = schedclock.NewJiffies(schedclock.MaxHZ + 1)
	assert.ErrorIs(t, err, schedclock.ErrInvalidSource)

	j, err := schedclock.NewJiffies(1000)
	require.NoError(t, err)
	time.Sleep(30 * time.Millisecond)
	j.Stop()
	n := j.Read()
	assert.GreaterOrEqual(t, n, uint64(20))
	assert.LessOrEqual(t, n, uint64(1000), "a stopped 1000 Hz counter counted %d in 30 ms", n)
	time.Sleep(5 * time.Millisecond)
	assert.Equal(t, n, j.Read(), "a stopped counter must not move")
	j.Stop() // idempotent
	src := j.Source()
	assert.Equal(t, uint64(1000), src.Rate)
	assert.Equal(t, n, src.Read())
}
