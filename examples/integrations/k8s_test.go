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
// wall time, an entry lives its TTL and no longer. The entry must be
// alive when it was read well within its TTL by Go's clock (a machine
// busy enough to stop the test for the TTL says nothing of the cache),
// and gone once the TTL and a millisecond have passed.
func TestTTLCacheOnTheDefaultClock(t *testing.T) {
	const ttl = 10 * time.Millisecond
	cache := integrations.NewTTLCache(adapt.Clock{}, ttl)
	set := time.Now()
	cache.Set("k", "v")
	v, ok := cache.Get("k")
	if time.Since(set) < ttl/2 {
		assert.True(t, ok, "gone at once")
		assert.Equal(t, "v", v)
	}
	time.Sleep(ttl + time.Millisecond)
	_, ok = cache.Get("k")
	assert.False(t, ok, "alive %v after it was set, with a TTL of %v", ttl+time.Millisecond, ttl)
}
