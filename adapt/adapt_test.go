package adapt_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/adapt"
	"github.com/schedclock/schedclock/schedclocktest"
)

// The interfaces the package doc names, declared here as their
// libraries declare them (zapcore.Clock; k8s.io/utils/clock's
// PassiveClock): examples/integrations checks the real ones.
type (
	zapClock interface {
		Now() time.Time
		NewTicker(time.Duration) *time.Ticker
	}
	passiveClock interface {
		Now() time.Time
		Since(time.Time) time.Duration
	}
)

var (
	_ zapClock     = adapt.Clock{}
	_ passiveClock = adapt.Clock{}
)

// TestOnAManualClock: every method follows the clock it is given, exactly.
func TestOnAManualClock(t *testing.T) {
	c, m := schedclocktest.NewManualClock(t)
	a := adapt.On(c)
	origin := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	assert.True(t, a.Now().Equal(origin), "Now = %v, want the Manual's wall origin", a.Now())
	start := a.Now()
	deadline := a.Deadline(time.Second)
	assert.Equal(t, c.Now().Add(time.Second), deadline)
	m.Advance(400 * time.Millisecond)
	assert.Equal(t, 400*time.Millisecond, a.Since(start))
	assert.True(t, a.Now().Equal(origin.Add(400*time.Millisecond)))
	assert.Equal(t, 600*time.Millisecond, a.Until(deadline))
	m.Advance(time.Second)
	assert.Equal(t, -400*time.Millisecond, a.Until(deadline), "past the deadline: negative, as time.Until")
	assert.Equal(t, schedclock.Instant(math64Max), a.Deadline(time.Duration(math64Max)), "Deadline saturates")
}

const math64Max = 1<<63 - 1

// TestTheZeroClockReadsTheDefaultClock: adapt.Clock{} is
// schedclock.WallNow and the default clock's Instants.
func TestTheZeroClockReadsTheDefaultClock(t *testing.T) {
	var a adapt.Clock
	before := schedclock.WallNow()
	now := a.Now()
	after := schedclock.WallNow()
	assert.False(t, now.Before(before), "%v before WallNow %v", now, before)
	assert.False(t, now.After(after), "%v after WallNow %v", now, after)
	assert.Equal(t, now, now.Round(0), "Now carries no monotonic reading")

	lo := schedclock.Now()
	d := a.Deadline(time.Hour)
	hi := schedclock.Now()
	assert.GreaterOrEqual(t, d, lo.Add(time.Hour))
	assert.LessOrEqual(t, d, hi.Add(time.Hour))
	left := a.Until(d)
	assert.Greater(t, left, 59*time.Minute)
	assert.LessOrEqual(t, left, time.Hour)
	assert.GreaterOrEqual(t, a.Since(before), time.Duration(0))
}

func TestNewTickerTicks(t *testing.T) {
	tk := adapt.Clock{}.NewTicker(time.Millisecond)
	defer tk.Stop()
	select {
	case <-tk.C:
	case <-time.After(5 * time.Second):
		require.Fail(t, "no tick in 5 s")
	}
}
