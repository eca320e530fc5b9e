//go:build gc && !purego

package schedclock

// tscSupported reports whether this build has the TSC assembly.
const tscSupported = true

// readTSC reads the time-stamp counter after every earlier load has
// completed (LFENCE; RDTSC, the kernel's rdtsc_ordered), so a counter value
// is never older than the latch bank it is combined with, and orders every
// later load after the read (a dependent load), so it is never newer than
// the seq re-check that validates that bank. See source_tsc_amd64.s.
func readTSC() uint64

func tscReader() func() uint64 { return readTSC }

// Now returns the clock's time in nanoseconds. It never waits for a
// writer, never allocates, and never returns less than a call that
// happened before it, given a counter that is monotonic across CPUs and,
// for a counter narrower than 64 bits, a refresh goroutine that runs
// within its refresh period (a wrap that nothing folded in time is lost,
// as in the kernel).
//
// (On amd64 it is assembly, clockNow: this wrapper is inlined into its
// callers.)
func (c *Clock) Now() int64 { return clockNow(c) }

// clockNow is Clock.Now in assembly; see source_tsc_amd64.s.
//
//go:noescape
func clockNow(c *Clock) int64

// genericNow is the generic reader, for clockNow to hand over to.
//
//lint:ignore U1000 called by clockNow in source_tsc_amd64.s
func genericNow(c *Clock) int64 { return c.now() }

// tscReadPtr identifies readTSC in a bank's read field; Clock.Now
// compares against it.
//
//lint:ignore U1000 read by Clock.Now in source_tsc_amd64.s
var tscReadPtr = funcPtr(readTSC)

func tscUnsupportedReason() string { return "" }
