//go:build gc && !purego

package schedclock

// This build reads the time base in assembly: see source_readers.go.
const asmBuild = true

var asm = asmReaders{timebase: readTimeBase}

// readTimeBase reads the time base after every earlier instruction has
// completed (isync) and before every later load (an acquire load that
// depends on the value read), so a counter value is neither older than
// the latch bank it is combined with nor newer than the seq re-check that
// validates that bank.
func readTimeBase() uint64
