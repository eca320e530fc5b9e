package integrations_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/examples/integrations"
	"github.com/schedclock/schedclock/schedclocktest"
	"github.com/stretchr/testify/assert"
)

// A rate limiter under test, on a Manual counter: the bucket refills
// exactly as far as the test advances it, with no sleeping.
func ExampleLimiter() {
	m, _ := schedclocktest.NewManual(1e9, 64)
	clock, err := schedclock.New(m.Source())
	if err != nil {
		panic(err)
	}
	defer clock.Close()
	lim := integrations.NewLimiter(clock, 10, 2) // 10 per second, bursts of 2

	fmt.Println(lim.Allow(), lim.Allow(), lim.Allow())
	m.Advance(99 * time.Millisecond)
	fmt.Println(lim.Allow())
	m.Advance(time.Millisecond) // 100 ms: one token
	fmt.Println(lim.Allow(), lim.Allow())
	// Output:
	// true true false
	// false
	// true false
}

func TestLimiterOnAManualClock(t *testing.T) {
	clock, m := schedclocktest.NewManualClock(t)
	lim := integrations.NewLimiter(clock, 1000, 5)

	allowed := func() (n int) {
		for lim.Allow() {
			n++
		}
		return n
	}
	assert.Equal(t, 5, allowed(), "the first burst")
	m.Advance(3 * time.Millisecond)
	assert.Equal(t, 3, allowed(), "3 ms at 1000/s")
	m.Advance(time.Hour)
	assert.Equal(t, 5, allowed(), "no more than a burst however long the wait")
	m.Advance(999 * time.Microsecond)
	assert.Equal(t, 0, allowed(), "a token is not there before its time")
}

// TestLimiterOnTheDefaultClock runs the limiter on real time for 20 ms:
// it must never let through more than the limit allows in the time that
// passed (time.Since's), and the coarse variant at most one more step's
// worth (1 ms of tokens).
func TestLimiterOnTheDefaultClock(t *testing.T) {
	const limit, window = 1000, 20 * time.Millisecond
	for _, tc := range []struct {
		name  string
		allow func(*integrations.Limiter) bool
		slack float64
	}{
		{"Allow", (*integrations.Limiter).Allow, 1},
		{"AllowCoarse", (*integrations.Limiter).AllowCoarse, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := integrations.NewLimiter(schedclock.Default(), limit, 1)
			start := time.Now()
			n := 0
			for time.Since(start) < window {
				if tc.allow(lim) {
					n++
				}
			}
			elapsed := time.Since(start)
			most := 1 + limit*elapsed.Seconds()*1.001 + tc.slack
			t.Logf("%d allowed in %v (at most %.0f)", n, elapsed, most)
			assert.LessOrEqual(t, float64(n), most)
			assert.Positive(t, n)
		})
	}
}
