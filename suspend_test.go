package schedclock_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
)

// Suspend and Resume (suspend.go): the clock stands still while
// suspended, reads no counter, and goes on from where it stopped.

func TestSuspendFreezesAndResumeSkipsTheGap(t *testing.T) {
	c, f := newFake(t, 64, ghz)
	f.Add(1000)
	before := c.Now()
	c.Suspend()
	assert.True(t, c.Info().Suspended)
	readsAtSuspend := f.Reads()
	f.Add(5 * ghz)
	assert.Equal(t, before, c.Now())
	c.Suspend() // idempotent
	c.Update()  // no-op while suspended
	f.StepBack(7 * ghz)
	assert.Equal(t, before, c.Now())
	assert.Equal(t, readsAtSuspend, f.Reads(), "a suspended clock must not read the counter")

	c.Resume()
	assert.False(t, c.Info().Suspended)
	assert.Equal(t, before, c.Now())
	f.Add(250)
	assert.Equal(t, before+250, c.Now())
	c.Resume() // idempotent
	assert.Equal(t, before+250, c.Now())
}

func TestRegisterWhileSuspended(t *testing.T) {
	c, f := newFake(t, 64, ghz)
	f.Add(1000)
	c.Suspend()
	b := &schedclock.FakeCounter{}
	b.Set(1 << 40)
	require.NoError(t, c.Register(b.Source("b", 64, 2*ghz)))
	b.Add(1000)
	assert.Equal(t, schedclock.Instant(1000), c.Now(), "still suspended")
	c.Resume()
	assert.Equal(t, schedclock.Instant(1000), c.Now())
	b.Add(2000)
	assert.Equal(t, schedclock.Instant(2000), c.Now())
}
