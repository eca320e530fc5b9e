package schedclock_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
)

// TestUnreachableClocksStop: clocks made by New and dropped without
// Close, some with Coarse's ticker running, stop their goroutines once
// the garbage collector finds them unreachable, as Go's own timers are
// collected. The wait is bounded by how long making them took (at least
// 2 s), since the cleanups run on one goroutine at the pace of the
// machine.
func TestUnreachableClocksStop(t *testing.T) {
	const clocks = 1000
	before := runtime.NumGoroutine()
	start := time.Now()
	held := make([]*schedclock.Clock, clocks) // alive until counted
	for i := range held {
		src, err := schedclock.Raw()
		require.NoError(t, err)
		held[i], err = schedclock.New(src)
		require.NoError(t, err)
		held[i].Now()
		if i%10 == 0 {
			held[i].Coarse() // its ticker too
		}
	}
	made := time.Since(start)
	require.GreaterOrEqual(t, runtime.NumGoroutine(), before+clocks, "the clocks' goroutines")
	clear(held) // dropped, none closed
	deadline := time.Now().Add(max(2*time.Second, 4*made))
	for {
		runtime.GC()
		n := runtime.NumGoroutine()
		if n <= before {
			t.Logf("%d clocks made in %v; goroutines back to %d (%d before) %v after", clocks, made, n, before, time.Since(start)-made)
			return
		}
		require.True(t, time.Now().Before(deadline), "%d goroutines, %d before the %d clocks were made and dropped", n, before, clocks)
		time.Sleep(10 * time.Millisecond)
	}
}
