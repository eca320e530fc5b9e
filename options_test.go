package schedclock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/schedclock/schedclock"
)

// A duplicate Option is refused.
// New's options (options.go): each may be given once, and a nil or zero
// Option is refused. What each option does is tested beside what it
// configures (calibrate_test.go, coarse_test.go).

func TestDuplicateOptionsAreRefused(t *testing.T) {
	ref := func() int64 { return time.Now().UnixNano() }
	for name, opts := range map[string][]schedclock.Option{
		"WithReference":        {schedclock.WithReference(ref), schedclock.WithReference(ref)},
		"WithCoarseResolution": {schedclock.WithCoarseResolution(time.Millisecond), schedclock.WithCoarseResolution(2 * time.Millisecond)},
	} {
		c, err := schedclock.New(schedclock.Portable(), opts...)
		if !assert.ErrorIs(t, err, schedclock.ErrInvalidOption, name) {
			_ = c.Close()
		}
	}
}

func TestWithReferenceRefusesNil(t *testing.T) {
	f := &schedclock.FakeCounter{}
	_, err := schedclock.New(f.Source("f", 64, 1e9), schedclock.WithReference(nil))
	assert.ErrorIs(t, err, schedclock.ErrInvalidOption)
	_, err = schedclock.New(f.Source("f", 64, 1e9), schedclock.Option{})
	assert.ErrorIs(t, err, schedclock.ErrInvalidOption)
}
