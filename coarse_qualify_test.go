package schedclock_test

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/internal/testenv"
)

// WallNow against the real wall clock for half a second (the
// qualification layer's): within 100µs, plus what the machine's own
// brackets cannot resolve (wide under emulation), with no monotonic
// reading.
func TestWallNowFollowsTheWallClock(t *testing.T) {
	testenv.Qualify(t)
	schedclock.WallNow()
	deadline := time.Now().Add(500 * time.Millisecond)
	worst, widths := time.Duration(0), []time.Duration{}
	for time.Now().Before(deadline) {
		a := time.Now()
		w := schedclock.WallNow()
		b := time.Now()
		mid := a.Add(b.Sub(a) / 2)
		// The bracket itself is the uncertainty.
		off := w.Sub(mid.Round(0))
		if off < 0 {
			off = -off
		}
		worst = max(worst, off-b.Sub(a)/2)
		widths = append(widths, b.Sub(a))
		time.Sleep(time.Millisecond)
	}
	slices.Sort(widths)
	typical := widths[len(widths)/2]
	t.Logf("worst |WallNow - time.Now|: %v (median bracket %v)", worst, typical)
	// The clock's own pairings are brackets of the same kind: where they
	// are wide (under emulation) so is its error.
	assert.LessOrEqual(t, worst, 100*time.Microsecond+20*typical)
	w := schedclock.WallNow()
	assert.Equal(t, w, w.Round(0), "WallNow carries no monotonic reading")
}

// TestCoarseStaleness measures how old a Coarse reading is (Now right
// after it, minus it) for a hot-path reader, one read every 50µs, and
// bounds it by what it measures about the machine: one resolution plus
// the lateness of a probe ticker of the same period running beside the
// clock's (the clock's ticker is late by as much as the scheduler makes
// any goroutine late), with a resolution's slack for the two not being
// late at the same moments. The figures of docs/benchmarks.md (how old Coarse can be)
// come from it. The qualification layer's: its bound is the machine's
// scheduling, measured.
func TestCoarseStaleness(t *testing.T) {
	testenv.Qualify(t)
	c, err := schedclock.New(schedclock.Portable())
	require.NoError(t, err)
	defer c.Close()
	const res = time.Millisecond
	var maxLate atomic.Int64
	stop := make(chan struct{})
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		tk := time.NewTicker(res)
		defer tk.Stop()
		next := time.Now().Add(res)
		for {
			select {
			case <-stop:
				return
			case now := <-tk.C:
				if late := int64(time.Since(next)); late > maxLate.Load() {
					maxLate.Store(late)
				}
				_ = now
				next = time.Now().Add(res)
			}
		}
	}()
	var st []int64
	// A hot path: busy between reads (time.Sleep(50µs) would sleep a
	// millisecond or more on an idle P, the netpoller's resolution).
	for i := 0; i < 20000; i++ {
		co := c.Coarse()
		st = append(st, int64(c.Now()-co))
		for next := c.Now().Add(50 * time.Microsecond); c.Now() < next; {
		}
	}
	close(stop)
	<-probeDone
	slices.Sort(st)
	p := func(q float64) time.Duration { return time.Duration(st[int(q*float64(len(st)-1))]) }
	late := time.Duration(maxLate.Load())
	t.Logf("Coarse staleness over %d reads: median %v, p99 %v, max %v; a probe ticker was at most %v late", len(st), p(0.5), p(0.99), p(1), late)
	assert.GreaterOrEqual(t, st[0], int64(0), "Coarse ahead of Now")
	assert.LessOrEqual(t, p(1), 2*res+2*late, "staler than one resolution and the scheduler's lateness allow")
}
