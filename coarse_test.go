package schedclock_test

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/schedclocktest"
)

func TestCoarseStartsCurrentAndFollowsNow(t *testing.T) {
	// On a manual counter Coarse is exact: Now, at once after Advance.
	mc, m := schedclocktest.NewManualClock(t)
	for _, d := range []time.Duration{5 * time.Millisecond, 7 * time.Millisecond, time.Hour, 1} {
		m.Advance(d)
		require.Equal(t, mc.Now(), mc.Coarse(), "after Advance(%v)", d)
	}
	m.Set(1 << 40)
	require.Equal(t, mc.Now(), mc.Coarse(), "after Set")

	// On any other counter it is a reading of Now refreshed by a ticker.
	var counter atomic.Uint64
	c, err := schedclock.New(schedclock.Source{Name: "c", Bits: 64, Rate: 1e9, Read: counter.Load})
	require.NoError(t, err)
	defer c.Close()
	counter.Store(5e6)
	// The first call is current, not 0.
	assert.Equal(t, schedclock.Instant(5*time.Millisecond), c.Coarse())
	counter.Store(12e6)
	assert.LessOrEqual(t, c.Coarse(), c.Now(), "never ahead of Now")
	// The ticker brings it up to date within its resolution (1 ms), or
	// as late as the scheduler runs it.
	require.Eventually(t, func() bool { return c.Coarse() == schedclock.Instant(12*time.Millisecond) }, 5*time.Second, 100*time.Microsecond)
	require.NoError(t, c.Close())
	counter.Store(1012e6)
	time.Sleep(5 * time.Millisecond)
	assert.Equal(t, schedclock.Instant(12*time.Millisecond), c.Coarse(), "after Close, Coarse stands still")
}

// Coarse never runs ahead of Now and never goes backwards, while a writer
// registers, suspends, resumes and updates the clock.
func TestCoarseNeverAheadOfNowNorBackwards(t *testing.T) {
	var trueTime atomic.Uint64
	mk := func() schedclock.Source { // a new counter, on the same true time
		return schedclock.Source{Name: "c", Bits: 64, Rate: 1e9, Read: trueTime.Load}
	}
	c, err := schedclock.New(mk(), schedclock.WithCoarseResolution(100*time.Microsecond))
	require.NoError(t, err)
	defer c.Close()
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			trueTime.Add(1000)
			if i%1024 == 0 {
				runtime.Gosched() // let the coarse goroutine tick
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			switch i % 4 {
			case 0:
				_ = c.Register(mk())
			case 1:
				c.Suspend()
			case 2:
				c.Resume()
			case 3:
				c.Update()
			}
		}
	}()
	last, reads, ticks := c.Coarse(), 0, 0
	for ticks < 10 {
		coarse := c.Coarse()
		now := c.Now()
		require.LessOrEqual(t, coarse, now, "Coarse ran ahead of Now")
		require.GreaterOrEqual(t, coarse, last, "Coarse went backwards")
		if coarse != last {
			ticks++
		}
		last = coarse
		reads++
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d reads, %d changes of the coarse value", reads, ticks)
}

func TestCoarseResolutionOption(t *testing.T) {
	f := &schedclock.FakeCounter{}
	for _, d := range []time.Duration{0, 99 * time.Microsecond, 2 * time.Second, -time.Millisecond} {
		_, err := schedclock.New(f.Source("f", 64, 1e9), schedclock.WithCoarseResolution(d))
		assert.ErrorIs(t, err, schedclock.ErrInvalidOption, "%v", d)
	}
	c, err := schedclock.New(f.Source("f", 64, 1e9), schedclock.WithCoarseResolution(time.Second))
	require.NoError(t, err)
	defer c.Close()
	assert.Zero(t, c.Coarse())
	f.Add(3e8)
	time.Sleep(20 * time.Millisecond)
	assert.Zero(t, c.Coarse(), "a 1 s resolution moved after 20 ms")
}

func TestCoarseAllocatesNothing(t *testing.T) {
	schedclock.Coarse()
	assert.Zero(t, testing.AllocsPerRun(1000, func() { schedclock.Coarse() }))
	assert.LessOrEqual(t, schedclock.Coarse(), schedclock.Now())
}

func TestSinceSaturates(t *testing.T) {
	c, f := newFake(t, 64, ghz)
	f.Set(5000)
	assert.Equal(t, 3000*time.Nanosecond, c.Since(2000))
	assert.Equal(t, time.Duration(0), c.Since(5000))
	assert.Equal(t, time.Duration(0), c.Since(9000), "a start not yet reached")
	assert.Equal(t, time.Duration(1<<63-1), c.Since(-1<<63), "the difference passes MaxInt64")
	start := schedclock.Now()
	time.Sleep(time.Millisecond)
	assert.GreaterOrEqual(t, schedclock.Since(start), time.Millisecond)
	assert.Equal(t, time.Duration(0), schedclock.Since(schedclock.Now().Add(time.Hour)))
}

// On a Bubble clock Coarse is exact: it equals Now once the bubble's time
// has moved, in every bubble. (A ticker of the resolution's period and a
// sleeper of the same length wake at the same fake instant, in an order
// the bubble does not fix: a ticked Coarse differed in about half the
// bubbles.)
func TestCoarseOnABubbleIsExact(t *testing.T) {
	const bubbles = 200
	differ := 0
	var first string
	for i := range bubbles {
		synctest.Test(t, func(t *testing.T) {
			c, err := schedclock.New(schedclock.Bubble())
			require.NoError(t, err)
			defer c.Close()
			require.Equal(t, c.Now(), c.Coarse())
			bubbleSleep(time.Millisecond)
			if co, now := c.Coarse(), c.Now(); co != now {
				if differ++; first == "" {
					first = fmt.Sprintf("bubble %d: Coarse %v, Now %v", i, time.Duration(co), time.Duration(now))
				}
			}
			bubbleSleep(1500 * time.Microsecond)
			assert.Equal(t, c.Now(), c.Coarse(), "after 2.5 ms")
		})
	}
	assert.Zero(t, differ, "Coarse differs from Now after time.Sleep(time.Millisecond) in %d of %d bubbles (%s)", differ, bubbles, first)
}

// A clock that switches to a Manual counter (or a Bubble Source) answers
// Coarse exactly at once: a value its ticker's Coarse stored before the
// switch is not returned after it. In a synctest bubble, so that the
// ticker does not clear it first; 20 times, because a kernel tick
// (Coarse's other refresh, on Linux) between the store and the switch
// would clear a stale value all the same, and did in one run of the
// mutant that keeps it.
func TestCoarseIsExactAtOnceAfterASwitchToAManualCounter(t *testing.T) {
	for range 20 {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			c, err := schedclock.New(schedclock.Source{Name: "fake time", Bits: 64, Rate: 1e9, Read: func() uint64 { return uint64(time.Since(start)) }})
			require.NoError(t, err)
			defer c.Close()
			bubbleSleep(time.Millisecond / 2)
			stored := c.Coarse()
			m, err := schedclocktest.NewManual(1e9, 64)
			require.NoError(t, err)
			require.NoError(t, c.Register(m.Source()))
			m.Advance(time.Microsecond)
			assert.Equal(t, c.Now(), c.Coarse(), "Coarse after the switch (it had stored %v)", time.Duration(stored))
		})
	}
}
