package integrations

import (
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/schedclock/schedclock/adapt"
)

// Kubernetes code takes a k8s.io/utils/clock.PassiveClock where it only
// reads the time: adapt.Clock is one (adapt.On for a Clock of your own,
// a schedclocktest.Manual's in tests).
var _ clock.PassiveClock = adapt.Clock{}

// TTLCache is a consumer of clock.PassiveClock as Kubernetes code writes
// them: entries expire ttl after they were set, by the clock's Since.
type TTLCache struct {
	clock clock.PassiveClock
	ttl   time.Duration

	mu      sync.Mutex
	entries map[string]ttlEntry
}

type ttlEntry struct {
	value string
	set   time.Time
}

// NewTTLCache returns an empty cache whose entries live for ttl on c.
func NewTTLCache(c clock.PassiveClock, ttl time.Duration) *TTLCache {
	return &TTLCache{clock: c, ttl: ttl, entries: map[string]ttlEntry{}}
}

// Set stores value under key, stamped with the clock's Now.
func (c *TTLCache) Set(key, value string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries[key] = ttlEntry{value: value, set: c.clock.Now()}
}

// Get returns the value under key, unless it has expired.
func (c *TTLCache) Get(key string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || c.clock.Since(e.set) >= c.ttl {
		delete(c.entries, key)
		return "", false
	}
	return e.value, true
}
