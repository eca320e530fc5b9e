package schedclock

import (
	"fmt"
	"time"
)

// Faults: user code the clock calls (a Source's Read, a reference) may
// panic at any moment. Every writer path publishes nothing it has not
// finished computing, so a recovered panic leaves the clock as it was;
// what is recorded here says where it happened, what, and when, and the
// error returned (or, in the background, the retry) names what panicked.

// faultLog is what Info reports of the faults recovered.
type faultLog struct {
	count  int    // panics recovered, on every path
	last   string // the last one: where, what, when
	streak int    // consecutive faulting ticks of the background goroutine
}

// lockWriter takes the writer lock for method, or returns an error
// wrapping ErrClosed, the lock not held, on a zero or closed Clock: the
// preamble of every writer method (the caller defers c.unlock()).
func (c *Clock) lockWriter(method string) error {
	if c == nil || c.clockState == nil {
		return fmt.Errorf("%w: %s on a zero Clock", ErrClosed, method)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrClosed, method)
	}
	return nil
}

// lockWriterUnless is lockWriter for a method that has nothing to do
// while the clock's suspended state is already the one it leads to
// (Update and Suspend on a suspended clock, Resume on a running one):
// locked is false, and the lock not held, after an error or when
// c.suspended == suspended; otherwise the caller defers c.unlock().
func (c *Clock) lockWriterUnless(method string, suspended bool) (locked bool, err error) {
	if err := c.lockWriter(method); err != nil {
		return false, err
	}
	if c.suspended == suspended {
		c.unlock()
		return false, nil
	}
	return true, nil
}

// recordFaultLocked counts a panic of user code that the writer path
// where recovered from.
func (c *Clock) recordFaultLocked(where string, r any) {
	c.faults.count++
	c.faults.last = fmt.Sprintf("%s: panic: %v (at %s)", where, faultValue(r), time.Now().Format(time.RFC3339Nano))
}

// recoverInto is deferred by a writer method that holds the lock: a panic
// of user code becomes an error wrapping ErrFault in *err, counted in
// Info. The method must publish nothing it has not finished computing,
// so that the clock is as it was.
func (c *Clock) recoverInto(method string, err *error) {
	if r := recover(); r != nil {
		c.recordFaultLocked(method, r)
		*err = fmt.Errorf("%w: %q: Read panicked during %s: %v", ErrFault, c.src.Name, method, faultValue(r))
	}
}

// culprit carries a panic out of a switch with what panicked, so that
// the switch blames it: the current source's Read (the old counter, read
// to pin and relate it), or the reference a re-anchoring is anchored on.
type culprit struct {
	reference bool
	v         any
}

// blamed calls f, re-panicking a panic of it as a culprit.
func blamed[T any](reference bool, f func() T) T {
	defer func() {
		if r := recover(); r != nil {
			panic(culprit{reference, r})
		}
	}()
	return f()
}

// faultValue is the value user code panicked with, unwrapped from a
// culprit.
func faultValue(r any) any {
	if f, ok := r.(culprit); ok {
		return f.v
	}
	return r
}

// panicError is a recovered panic value as an error, so that the value
// can be unwrapped from the error that reports it.
type panicError struct{ v any }

func (p panicError) Error() string { return fmt.Sprint(p.v) }

// readOnce calls src.Read, turning a panic into an error.
func readOnce(src Source) (cyc uint64, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w %q: Read panicked: %w", ErrInvalidSource, src.Name, panicError{r})
		}
	}()
	return src.Read(), nil
}
