package schedclock

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Until returns the time left on the clock until dl: dl.Sub(c.Now()),
// negative once the clock has passed it, as time.Until.
func (c *Clock) Until(dl Instant) time.Duration { return dl.Sub(c.Now()) }

// Until returns the time left on the default clock until dl (an Instant
// of it, such as Now().Add(d)): Default().Until(dl), negative once dl has
// passed, as time.Until.
func Until(dl Instant) time.Duration { return defaultClock.Until(dl) }

// WithTimeout is WithDeadline(parent, c.Now().Add(d)).
func (c *Clock) WithTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	c = c.orDefault()
	return c.WithDeadline(parent, c.Now().Add(d))
}

// WithDeadline returns a copy of parent that is done, with Err
// context.DeadlineExceeded, when the clock reaches dl (at once if it
// has), or with the cancel's or the parent's error when the returned
// cancel is called or parent is done, whichever comes first: what
// context.WithDeadline does for a time.Time. Call cancel once the work
// is done, as for context.WithDeadline.
//
// What ends it when the clock reaches dl depends on the clock. On the
// default clock, and every clock whose counter runs at real time, it is
// the runtime's timer of the time left, context.WithTimeout(parent,
// c.Until(dl)): that timer follows Go's monotonic clock, so a deadline
// far off can end off by NTP's slew of it (at most 500 ppm), and a
// clock on a counter of another pace (a Source of yours, a suspended
// clock) is not followed. On a clock on a schedclocktest Manual counter,
// the Manual's Advance and Set end it, at once when they take the
// clock's Now to dl or past it, and real time never does; a clock that
// no longer follows the counter (suspended, closed, switched to another
// Source) ends none until its Now reaches dl at an Advance or Set. On a
// clock on Bubble in a testing/synctest bubble, the bubble's timer, at
// the bubble's time.
//
// Its Deadline is a real time, what libraries compare with time.Now:
// time.Now() plus c.Until(dl) at the call, or the parent's deadline if
// that is earlier. On a Manual clock it is where dl would fall had the
// clock run at real time from the call on: after time.Now at the call,
// where WallTime(dl), in 2000, would long be past.
func (c *Clock) WithDeadline(parent context.Context, dl Instant) (context.Context, context.CancelFunc) {
	c = c.orDefault()
	if m := c.st.exact.manual.Load(); m != nil {
		return m.withDeadline(parent, c, dl)
	}
	return context.WithTimeout(parent, c.Until(dl))
}

// manualContext is WithDeadline's context on a clock on a manual
// counter: the counter's Advance and Set end it (manual.expireDeadlines).
// No context of the context package can be made to end with
// DeadlineExceeded on demand, so it is a type of its own: values and
// Cause go through inner, a context.WithCancelCause of the parent, which
// it cancels as it ends, and it has its own done channel, so that the
// contexts made from it take their Err from its Err (the context
// package registers a child with its nearest cancelCtx only when that
// cancelCtx's Done is the parent's own). Those children are ended
// through its AfterFunc, synchronously, as a context.WithDeadline's
// are; the parent's end reaches it through a context.AfterFunc, a
// goroutine later.
type manualContext struct {
	inner    context.Context
	cancel   context.CancelCauseFunc
	deadline time.Time
	done     chan struct{}
	m        *manual
	pending  pendingDeadline

	mu    sync.Mutex
	err   error     // set before done is closed
	after []*func() // AfterFunc's functions, run as it ends
	// unhook stops the context.AfterFunc that ends it with its parent.
	unhook func() bool
}

func (m *manual) withDeadline(parent context.Context, c *Clock, dl Instant) (context.Context, context.CancelFunc) {
	left := c.Until(dl)
	deadline := time.Now().Add(left)
	if pd, ok := parent.Deadline(); ok && pd.Before(deadline) {
		deadline = pd
	}
	inner, cancel := context.WithCancelCause(parent)
	mc := &manualContext{inner: inner, cancel: cancel, deadline: deadline, done: make(chan struct{}), m: m}
	mc.pending = pendingDeadline{now: c.Now, at: dl, expire: func() { mc.end(context.DeadlineExceeded, context.DeadlineExceeded) }}
	if err := inner.Err(); err != nil {
		mc.end(err, context.Cause(inner))
		return mc, func() {}
	}
	if !m.addDeadline(&mc.pending) {
		mc.end(context.DeadlineExceeded, context.DeadlineExceeded)
		return mc, func() {}
	}
	unhook := context.AfterFunc(inner, func() { mc.end(inner.Err(), context.Cause(inner)) })
	mc.mu.Lock()
	mc.unhook = unhook
	mc.mu.Unlock()
	return mc, func() { mc.end(context.Canceled, context.Canceled) }
}

// end ends mc with err, once: the first end wins.
func (mc *manualContext) end(err, cause error) {
	mc.mu.Lock()
	if mc.err != nil {
		mc.mu.Unlock()
		return
	}
	mc.err = err
	if mc.unhook != nil {
		mc.unhook() // before the cancel of inner, which would run it
	}
	mc.cancel(cause)
	close(mc.done)
	after := mc.after
	mc.after = nil
	mc.mu.Unlock()
	mc.m.removeDeadline(&mc.pending)
	for _, f := range after {
		(*f)()
	}
}

func (mc *manualContext) Deadline() (time.Time, bool) { return mc.deadline, true }
func (mc *manualContext) Done() <-chan struct{}       { return mc.done }
func (mc *manualContext) Value(key any) any           { return mc.inner.Value(key) }

func (mc *manualContext) Err() error {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return mc.err
}

// AfterFunc runs f once mc has ended, synchronously as it ends (at
// once, in a goroutine of its own, if it has), unless stop is called
// first: stop reports whether it kept f from running. The context
// package's propagation of an end to mc's children calls it.
func (mc *manualContext) AfterFunc(f func()) (stop func() bool) {
	p := &f
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if mc.err != nil {
		go f()
		return func() bool { return false }
	}
	mc.after = append(mc.after, p)
	return func() bool {
		mc.mu.Lock()
		defer mc.mu.Unlock()
		i := slices.Index(mc.after, p)
		if i < 0 {
			return false
		}
		mc.after = slices.Delete(mc.after, i, i+1)
		return true
	}
}

func (mc *manualContext) String() string {
	return "schedclock.Clock.WithDeadline(" + mc.pending.at.String() + ")"
}
