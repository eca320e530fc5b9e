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
	seen        map[string]bool // the Options given, by name
}

// WithReference gives the Clock a trusted nanosecond clock to follow: the
// Clock refines its counter's rate against it in the background and
// watches the counter against it for life, re-anchoring the clock when
// the counter steps back, jumps or changes rate (see [Watch] Reanchors),
// and refusing a reading far ahead of what now counted (see [Watch]
// CounterFaults).
// The default clock's reference is CLOCK_MONOTONIC_RAW.
//
// now must be safe for concurrent use, should never go backwards, and
// should not call the Clock's methods other than Now and Info: it is
// called while the Clock's writer lock is held, and Register, Update,
// Suspend, Resume and Close called from it return an error (they would
// wait for themselves), changing nothing. It is
// called from the Clock's background goroutine only, in bursts (8
// bracketed reads for each comparison of the watch, 32 for each
// refinement of the rate) on at most ten wake-ups a second: the watch
// compares every 100 ms at first, then at periods doubling to 2 s while
// the counter agrees, and
// refinements ride on its wake-ups. A reference that
// misbehaves is checked against the runtime's monotonic clock: one that
// stops, steps back, jumps or runs more than 1000 ppm away from it is not
// followed (no re-anchoring, no refinement) until it agrees again, and
// Info.Watch.Reference says what it did; one that panics is counted in
// Info.Faults. One that blocks delays the clock's background work (and
// Close) but never Now, Coarse or Info.
func WithReference(now func() int64) Option {
	return Option{func(o *options) error {
		if now == nil {
			return errors.New("WithReference: the reference clock is nil")
		}
		if err := o.once("WithReference"); err != nil {
			return err
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
		if err := o.once("WithCoarseResolution"); err != nil {
			return err
		}
		o.coarseEvery = d
		return nil
	}}
}

// once refuses an Option given twice: which one should win is not for
// this package to guess.
func (o *options) once(name string) error {
	if o.seen[name] {
		return fmt.Errorf("%s given twice", name)
	}
	if o.seen == nil {
		o.seen = map[string]bool{}
	}
	o.seen[name] = true
	return nil
}

// apply collects opts, turning the first bad one into an error wrapping
// errInvalidOption.
func (o *options) apply(opts []Option) error {
	for _, opt := range opts {
		if opt.apply == nil {
			return fmt.Errorf("%w: a zero Option (make Options with WithReference, WithCoarseResolution)", errInvalidOption)
		}
		if err := opt.apply(o); err != nil {
			return fmt.Errorf("%w: %v", errInvalidOption, err)
		}
	}
	return nil
}
