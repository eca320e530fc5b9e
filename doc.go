// Package schedclock is a monotonic nanosecond clock for hot paths
// (tracing, metrics, rate limiters, latency histograms): it reads the
// CPU's counter (in a VM, the hypervisor's clock page) directly, never
// waits for anyone, and never goes backwards. It is a port of the Linux
// kernel's sched_clock to Go.
//
//	start := schedclock.Now()
//	work()
//	elapsed := schedclock.Since(start) // a time.Duration, never negative
//
// [Now] returns an [Instant], nanoseconds since the package was
// initialised: compare Instants with Before and After, subtract them with
// Sub, and measure with [Since] and [Until]. [Coarse] is a reading of Now
// about a millisecond old for a few nanoseconds, for deadlines, caches
// and rate limits. [WallNow] is the wall-clock time read from the
// counter, cheaper than time.Now, with no monotonic reading, and
// [BoundedWallNow] the same with its error bound. Where the
// machine has no counter the package can trust, the clock runs on Go's
// monotonic clock and costs what time.Since costs. Timers, sleeping and a
// time.Time with a monotonic reading are the time package's.
//
// Code whose behaviour depends on time takes a *[Clock]. A nil *Clock is
// the default clock, the one Now reads ([Default]), so such code reads it
// unless given another, and its tests give it one from package
// schedclocktest: NewManualClock, which moves only when the test says
// (Advance), or NewBubbleClock, which follows a testing/synctest bubble's
// time. [Clock.WithDeadline] and [Clock.WithTimeout] make a context that
// ends when that clock reaches a deadline.
//
// [New] makes a Clock on a [Source] of your own, and [Clock.Info] says
// what a clock runs on and why. Importing the package reads no file,
// makes no system call and starts no goroutine: the default clock picks
// its counter in the background once it is used.
//
// What the clock promises, the test behind each promise and the limits
// are in docs/guarantees.md, in the module's repository
// (github.com/schedclock/schedclock); how the default clock picks and
// watches its counter on each architecture, in docs/default-clock.md;
// wall time's bound, in docs/wall-bound.md; what each call costs, in
// docs/benchmarks.md; the whole API, in docs/api.md.
package schedclock
