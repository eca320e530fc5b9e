package schedclock_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/internal/testenv"
)

// TestBoundedWallNowBracketsRealtime: CLOCK_REALTIME read before and
// after each bounded reading meets the reading's interval, whatever
// bounds it here: 10,000 readings, 1,000,000 in the qualification
// layer. (The interval's width is the source's; the map's own error
// alone is held to CLOCK_REALTIME by TestTheWallMapsErrorIsInTheBound.)
func TestBoundedWallNowBracketsRealtime(t *testing.T) {
	n := 10_000
	if testenv.Qualifying() {
		n = 1_000_000
	}
	var widest time.Duration
	for range n {
		before := time.Now()
		b := schedclock.BoundedWallNow()
		after := time.Now()
		if b.Source() == "none" {
			t.Skipf("no source bounds wall time here: %s", b.Reason())
		}
		widest = max(widest, b.Latest().Sub(b.Earliest())/2)
		if after.Before(b.Earliest()) || before.After(b.Latest()) {
			t.Fatalf("CLOCK_REALTIME [%v, %v] outside %v", before, after, b)
		}
	}
	b := schedclock.BoundedWallNow()
	t.Logf("%d readings, at most ±%v; now %v", n, widest, b)
}

// TestBoundedWallNowAllocatesNothing: the read path allocates nothing.
func TestBoundedWallNowAllocatesNothing(t *testing.T) {
	schedclock.BoundedWallNow()
	assert.Zero(t, testing.AllocsPerRun(10_000, func() { schedclock.BoundedWallNow() }))
}

// TestBoundedWallNowIsWallNowsTime: a reading's interval is centred on
// WallNow's time (where the fallback sources bound it), or holds it.
func TestBoundedWallNowIsWallNowsTime(t *testing.T) {
	before := schedclock.WallNow()
	b := schedclock.BoundedWallNow()
	after := schedclock.WallNow()
	if b.Source() == "none" || b.Source() == "vmclock" {
		t.Skipf("not centred on WallNow here: %v", b)
	}
	mid := b.Earliest().Add(b.Latest().Sub(b.Earliest()) / 2)
	assert.False(t, mid.Before(before.Add(-time.Microsecond)) || mid.After(after.Add(time.Microsecond)),
		"the interval's middle %v is not WallNow's [%v, %v]", mid, before, after)
}

// TestInfoSaysWhatBoundsWallTime: after a bounded reading the default
// clock's Info names the source, the bound and the status; a clock made
// by New says nothing about it.
func TestInfoSaysWhatBoundsWallTime(t *testing.T) {
	b := schedclock.BoundedWallNow()
	// Info is the snapshot the last writer took where a writer holds the
	// lock (the default clock's set-up may, early in a test binary): a
	// writer after the reading makes that snapshot see it.
	require.NoError(t, schedclock.Default().Update())
	info := schedclock.Default().Info().WallBound
	assert.True(t, strings.HasPrefix(info, b.Source()), "%q does not start with %q", info, b.Source())
	assert.Contains(t, info, b.Status().String())
	if b.Source() != "none" {
		assert.Contains(t, info, "±")
	}
	c, err := schedclock.New(schedclock.Portable())
	require.NoError(t, err)
	defer c.Close()
	assert.Empty(t, c.Info().WallBound)
}

// TestWallBoundMethods: the zero WallBound, and what a reading's String
// says.
func TestWallBoundMethods(t *testing.T) {
	var zero schedclock.WallBound
	assert.Equal(t, schedclock.WallUnknown, zero.Status())
	assert.Empty(t, zero.Source())
	assert.Empty(t, zero.Reason())
	assert.Zero(t, zero.Generation())
	assert.False(t, zero.After(time.Time{}))
	assert.False(t, zero.Before(time.Unix(1<<40, 0)))
	b := schedclock.BoundedWallNow()
	s := b.String()
	assert.Contains(t, s, "from "+b.Source()+", "+b.Status().String())
	assert.Contains(t, s, "generation")
	assert.Equal(t, "free-running", schedclock.WallFreeRunning.String())
	assert.Equal(t, "WallStatus(7)", schedclock.WallStatus(7).String())
}
