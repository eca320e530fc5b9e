//go:build gc && !purego

package schedclock

// This build reads the TSC in assembly: see source_readers.go.
const asmBuild = true

var asm = asmReaders{tsc: readTSC}

// readTSC reads the time-stamp counter after every earlier load has
// completed (LFENCE; RDTSC, the kernel's rdtsc_ordered), so a counter value
// is never older than the latch bank it is combined with, and orders every
// later load after the read (a dependent load), so it is never newer than
// the seq re-check that validates that bank. See source_tsc_amd64.s.
func readTSC() uint64
