package schedclock

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"time"
	"unsafe"
)

// Faults: user code the clock calls (a Source's Read, a reference) may
// panic at any moment. Every writer path publishes nothing it has not
// finished computing, so a recovered panic leaves the clock as it was;
// what is recorded here says where it happened, what, and when, and the
// error returned (or, in the background, the retry) names what panicked.

// faultLog is what Info reports of the faults recovered.
type faultLog struct {
	count  int    // panics and exits recovered from, on every path
	last   string // the last one: where, what, when
	streak int    // consecutive faulting ticks of the background goroutine
	// exiting says a runtime.Goexit of user code is unwinding the
	// current writer and has been recorded: the deferred functions it
	// runs through on its way out undo their part without counting it
	// again. The next writer clears it.
	exiting bool
	// retry is the backoff after the background goroutine's last fault,
	// which the goroutine that replaces an exited one waits out.
	retry time.Duration
}

// goexit stands for a runtime.Goexit of user code (t.Fatal, t.FailNow,
// testify's require, in a test's fake Source or reference): nothing can
// stop the goroutine from exiting, but the deferred functions it runs
// through see it, as a deferred function that recovered nothing and ran
// before its function returned (exitOrPanic), and undo and record it as
// they would a panic.
type goexit struct{}

func (goexit) String() string {
	return "runtime.Goexit (user code exited the goroutine: t.Fatal, t.FailNow or require in a Read or reference?)"
}

// exitOrPanic is what a deferred function must handle: r, the value it
// recovered, or a goexit when it recovered nothing and returned says the
// function it was deferred by did not return.
func exitOrPanic(r any, returned bool) any {
	if r == nil && !returned {
		return goexit{}
	}
	return r
}

// lockWriter takes the writer lock for method, or returns an error
// wrapping ErrClosed, the lock not held, on a zero or closed Clock, or
// errReentered when user code the writer is running called it (see
// lockAsWriter): the preamble of every writer method (the caller defers
// c.unlock()).
func (c *Clock) lockWriter(method string) error {
	if c == nil || c.st == nil {
		return fmt.Errorf("%w: %s on a zero Clock", ErrClosed, method)
	}
	c.st.policy.startSetUp() // the default clock's background work must run: see default.go
	if !c.lockAsWriter() {
		return reentered(method)
	}
	c.st.faults.exiting = false
	if c.st.loop.closed {
		c.st.writer.g.Store(0)
		c.st.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrClosed, method)
	}
	return nil
}

// lockAsWriter takes the writer lock and, where user code may run under
// it, records the calling goroutine as its holder; or it returns false,
// the lock not taken, when the calling goroutine holds it already: a
// Read or reference that the writer is running called a writer method
// of the same clock, which would otherwise wait forever for its own
// goroutine.
//
// Go has no goroutine-local state to tell the holder from another
// goroutine, so the holder is named by its goroutine ID, read from its
// stack trace's header: a traceback, microseconds. It is paid only
// where a Read or reference is user code (see ownCode): the package's own counters and references
// never call a writer method, so the default clock's writers never pay
// it; a waiter pays it only while a named holder holds the lock. The check is exact: writer.g is set only by the
// holder while it holds the lock and cleared before it lets go
// (unlock), so it equals a waiter's ID only when the waiter is the
// holder.
func (c *Clock) lockAsWriter() bool {
	if !c.st.mu.TryLock() {
		if h := c.st.writer.g.Load(); h != 0 && h == goroutineID() {
			return false
		}
		c.st.mu.Lock()
	}
	if c.st.writer.userSrc || c.st.writer.userRef {
		c.nameWriterLocked()
	}
	return true
}

// nameWriterLocked records the calling goroutine, which holds the writer
// lock, as its holder (see lockAsWriter).
func (c *Clock) nameWriterLocked() { c.st.writer.g.Store(goroutineID()) }

// modulePath is this module's: code whose function names start with it
// (and a dot or /internal/) is the package's own. A fork under another
// path takes all code for user code, which costs its writers the
// naming, never a check.
const modulePath = "github.com/schedclock/schedclock"

// ownCode reports whether f is the package's own code (a counter, a
// Manual's or a Jiffies' Read, the default clock's reference), which
// never calls a Clock's writer methods, rather than user code, which
// may (see lockAsWriter).
func ownCode[F func() uint64 | func() int64](f F) bool {
	fv := *(*unsafe.Pointer)(unsafe.Pointer(&f))
	if fv == nil {
		return true // nothing to call
	}
	fn := runtime.FuncForPC(*(*uintptr)(fv)) // a func value points to its code pointer
	if fn == nil {
		return false
	}
	name := fn.Name()
	return strings.HasPrefix(name, modulePath+".") || strings.HasPrefix(name, modulePath+"/internal/")
}

// reentered is the error of a writer method that user code called from
// inside the same clock's writer.
func reentered(method string) error {
	return fmt.Errorf("%w: %s was called by a Read or reference that the clock's own writer is running", errReentered, method)
}

// goroutineID returns the calling goroutine's ID, from the header of its
// stack trace ("goroutine 18 [running]:"), or 0 if the header cannot be
// read (goroutine IDs start at 1).
func goroutineID() uint64 {
	var buf [64]byte
	rest, ok := bytes.CutPrefix(buf[:runtime.Stack(buf[:], false)], []byte("goroutine "))
	if !ok {
		return 0
	}
	var id uint64
	for _, b := range rest {
		if b < '0' || b > '9' {
			return id
		}
		id = id*10 + uint64(b-'0')
	}
	return 0 // the header was cut short
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
	if c.st.suspended == suspended {
		c.unlock()
		return false, nil
	}
	return true, nil
}

// recordFaultLocked counts a panic or an exit (a goexit) of user code
// that the writer path where recovered from; an exit once, however many
// deferred functions it unwinds through.
func (c *Clock) recordFaultLocked(where string, r any) {
	if _, exit := faultValue(r).(goexit); exit {
		if c.st.faults.exiting {
			return
		}
		c.st.faults.exiting = true
		c.st.faults.count++
		c.st.faults.last = fmt.Sprintf("%s: %v (at %s)", where, goexit{}, time.Now().UTC().Format(time.RFC3339Nano))
		return
	}
	c.st.faults.count++
	c.st.faults.last = fmt.Sprintf("%s: panic: %v (at %s)", where, faultValue(r), time.Now().UTC().Format(time.RFC3339Nano))
}

// guard runs f, which calls user code (a Source's Read, a reference),
// and hands what stopped it early to fault: the value of a panic, which
// guard recovers and returns, or a goexit for an exit of the goroutine
// (runtime.Goexit: t.Fatal in a test's Read), which nothing can stop
// and which goes on unwinding after fault. fault puts back what f had
// changed and records the fault (recordFaultLocked); a nil fault records
// it at where. Every writer path runs the user code it calls through
// guard, so that f publishes nothing it has not finished computing and
// the clock is as it was.
func (c *Clock) guard(where string, f func(), fault func(r any)) (panicked any) {
	returned := false
	defer func() {
		if r := exitOrPanic(recover(), returned); r != nil {
			if fault == nil {
				c.recordFaultLocked(where, r)
			} else {
				fault(r)
			}
			panicked = r
		}
	}()
	f()
	returned = true
	return nil
}

// faultError is the error of writer method method after guard returned
// r: nil where f returned, else one wrapping ErrFault with the value the
// current source's Read panicked with.
func (c *Clock) faultError(method string, r any) error {
	if r == nil {
		return nil
	}
	return fmt.Errorf("%w: %q: Read panicked during %s: %v", ErrFault, c.st.src.Name, method, faultValue(r))
}

// culprit carries a panic out of a switch with what panicked, so that
// the switch blames it: the current source's Read (the old counter, read
// to pin and relate it), or the reference a re-anchoring is anchored on.
type culprit struct {
	reference bool
	v         any
}

// blamed calls f, re-panicking a panic of it as a culprit. An exit of
// the goroutine in f cannot be re-raised as anything: it goes on, and
// the switch's own deferred function sees it (see goexit).
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

func (p panicError) Error() string { return fmt.Sprintf("%v", p.v) }

// asPanic finds the panicError that err wraps: errors.As, without the
// reflection (internal/reflectlite) that errors.As links into every
// binary.
func asPanic(err error) (panicError, bool) {
	for err != nil {
		switch e := err.(type) {
		case panicError:
			return e, true
		case interface{ Unwrap() []error }:
			for _, w := range e.Unwrap() {
				if p, ok := asPanic(w); ok {
					return p, true
				}
			}
			return panicError{}, false
		case interface{ Unwrap() error }:
			err = e.Unwrap()
		default:
			return panicError{}, false
		}
	}
	return panicError{}, false
}

// readOnce calls src.Read, turning a panic into an error.
func readOnce(src Source) (cyc uint64, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w %q: Read panicked: %w", ErrInvalidSource, src.Name, panicError{r})
		}
	}()
	return src.Read(), nil
}
