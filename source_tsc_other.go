//go:build !amd64 || !gc || purego

package schedclock

// tscSupported reports whether this build has the TSC assembly.
const tscSupported = false

// tscReader is never called when tscSupported is false: there is no
// counter to read in this build.
func tscReader() func() uint64 { return nil }

// Now returns the clock's time in nanoseconds. It never waits for a
// writer, never allocates, and never returns less than a call that
// happened before it, given a counter that is monotonic across CPUs and,
// for a counter narrower than 64 bits, a refresh goroutine that runs
// within its refresh period (a wrap that nothing folded in time is lost,
// as in the kernel).
func (c *Clock) Now() int64 { return otherNow(c) }

// tscUnsupportedReason says why this build has no assembly for the counter.
func tscUnsupportedReason() string { return noAsmReason("amd64") }
