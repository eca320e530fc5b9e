//go:build gc && !purego

package schedclock

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/pvclock"
)

// TestPvclockSharedLayout: clockNow reads pvclockShared's page at +0 and
// its src at +8 (now_amd64.s).
func TestPvclockSharedLayout(t *testing.T) {
	assert.EqualValues(t, 0, unsafe.Offsetof(pvclockShared.page))
	assert.EqualValues(t, 8, unsafe.Offsetof(pvclockShared.src))
}

// TestNowInlinesThePvclockPage: Clock.Now's inlined page read agrees
// with the Go path (genericNow, through readPvclock) on the real page,
// reading for reading, in order.
func TestNowInlinesThePvclockPage(t *testing.T) {
	src, err := Paravirt()
	if err != nil || pvclockShared.page == nil {
		t.Skipf("no pvclock page here: %v", err)
	}
	c, err := New(src)
	require.NoError(t, err)
	defer c.Close()
	prev := c.Now()
	for range 20000 {
		g := genericNow(c)
		a := c.Now()
		require.LessOrEqual(t, prev, g)
		require.LessOrEqual(t, g, a)
		prev = a
	}
}

// onSyntheticPvclock points the shared pvclock state at a copy of the
// real page for the length of f, with a Clock on it; the Clock is
// closed (its goroutine stopped) before the state is restored.
func onSyntheticPvclock(t *testing.T, f func(c *Clock, pg *pvclock.Page, s *paravirtSource)) {
	src, err := Paravirt()
	if err != nil || pvclockShared.page == nil {
		t.Skipf("no pvclock page here: %v", err)
	}
	pg, page := syntheticCopy(t)
	s, err := newParavirtSource(page, rawNow)
	require.NoError(t, err)
	saved := pvclockShared
	pvclockShared.page, pvclockShared.src = pg, s
	defer func() { pvclockShared = saved }()
	c, err := New(src)
	require.NoError(t, err)
	defer c.Close()
	f(c, pg, s)
}

// TestNowLeavesAnUnstablePage: with the stable bit clear, Now must not
// read the page inline but go through readPvclock, which falls back.
func TestNowLeavesAnUnstablePage(t *testing.T) {
	onSyntheticPvclock(t, func(c *Clock, pg *pvclock.Page, s *paravirtSource) {
		before := c.Now()
		p := pg.Load()
		p.Flags &^= pvclock.TSCStableBit
		pg.Publish(p)
		after := c.Now()
		assert.True(t, s.fellBack.Load(), "Now read a page without PVCLOCK_TSC_STABLE_BIT inline")
		assert.GreaterOrEqual(t, after, before)
	})
}

// TestNowLeavesAPageUnderUpdate: with an update held half-written (odd
// version, the new tsc_timestamp beside the old time), Now must not
// accept the torn page: the inline read hands over, the bounded Go read
// gives up and falls back, and the reading stays on the page's timeline.
func TestNowLeavesAPageUnderUpdate(t *testing.T) {
	onSyntheticPvclock(t, func(c *Clock, pg *pvclock.Page, s *paravirtSource) {
		before := c.Now()
		p := pg.Load()
		pg.BeginUpdate()
		// Torn: a stamp 2^31 counts (about a second here) before the
		// time beside it, a reading that still passes the conversion's
		// range check.
		p.TSCTimestamp -= 1 << 31
		pg.Store(p)
		after := c.Now()
		assert.True(t, s.fellBack.Load(), "Now accepted a page with an odd version")
		assert.GreaterOrEqual(t, after, before)
		assert.Less(t, after-before, int64(100e6), "a reading far from the page's time")
	})
}
