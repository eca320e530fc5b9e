package integrations_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/schedclock/schedclock/adapt"
	"github.com/schedclock/schedclock/examples/integrations"
	"github.com/schedclock/schedclock/schedclocktest"
)

// A cache written against k8s.io/utils/clock.PassiveClock, run on
// schedclock with adapt.Clock, and tested by hand with a Manual counter.
func ExampleTTLCache() {
	c, m := schedclocktest.NewManualClock(nil)
	defer c.Close()
	cache := integrations.NewTTLCache(adapt.On(c), time.Minute)
	cache.Set("pod", "running")
	m.Advance(59 * time.Second)
	fmt.Println(cache.Get("pod"))
	m.Advance(time.Second)
	fmt.Println(cache.Get("pod"))
	// Output:
	// running true
	//  false
}

// TestTTLCacheOnTheDefaultClock: on adapt.Clock{}, the default clock's
// wall time, an entry lives its TTL and no longer.
func TestTTLCacheOnTheDefaultClock(t *testing.T) {
	cache := integrations.NewTTLCache(adapt.Clock{}, 50*time.Millisecond)
	cache.Set("k", "v")
	v, ok := cache.Get("k")
	assert.True(t, ok)
	assert.Equal(t, "v", v)
	time.Sleep(60 * time.Millisecond)
	_, ok = cache.Get("k")
	assert.False(t, ok, "alive 60 ms after it was set, with a TTL of 50 ms")
}
