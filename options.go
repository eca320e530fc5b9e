package schedclock

import (
	"errors"
	"fmt"
	"time"
)

// An Option configures a Clock made by New: WithReference,
// WithCoarseResolution.
type Option struct {
	apply func(*options) error
}

// options is what New's Options set.
type options struct {
	reference   func() int64
	coarseEvery time.Duration
}

// WithReference gives the Clock a trusted nanosecond clock to follow: the
// Clock refines its counter's rate against it in the background and
// watches the counter against it for life, re-anchoring the clock when
// the counter steps back, jumps or changes rate (see [Info] Reanchors).
// The default clock's reference is CLOCK_MONOTONIC_RAW.
//
// now must be safe for concurrent use, must never go backwards, and must
// not call the Clock's methods other than Now (it is called while the
// Clock's writer lock is held). It is called from the Clock's background
// goroutine only, some tens of times a second.
func WithReference(now func() int64) Option {
	return Option{func(o *options) error {
		if now == nil {
			return errors.New("WithReference: the reference clock is nil")
		}
		o.reference = now
		return nil
	}}
}

// WithCoarseResolution sets how often the value Coarse returns is brought
// up to date: from 100µs to 1s; the default is 1ms.
func WithCoarseResolution(d time.Duration) Option {
	return Option{func(o *options) error {
		if d < minCoarseResolution || d > maxCoarseResolution {
			return fmt.Errorf("WithCoarseResolution(%v): want %v to %v", d, minCoarseResolution, maxCoarseResolution)
		}
		o.coarseEvery = d
		return nil
	}}
}

// apply collects opts, turning the first bad one into an error wrapping
// ErrInvalidOption.
func (o *options) apply(opts []Option) error {
	for _, opt := range opts {
		if opt.apply == nil {
			return fmt.Errorf("%w: a zero Option (make Options with WithReference, WithCoarseResolution)", ErrInvalidOption)
		}
		if err := opt.apply(o); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidOption, err)
		}
	}
	return nil
}
