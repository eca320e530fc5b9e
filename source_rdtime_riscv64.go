//go:build gc && !purego

package schedclock

// This build reads the time CSR (RDTIME) in assembly: see source_readers.go.
const asmBuild = true

var asm = asmReaders{rdtime: readRDTIME}

// readRDTIME reads the time CSR after every earlier load and before every
// later one (a fence on each side), so a counter value is neither older
// than the latch bank it is combined with nor newer than the seq re-check
// that validates that bank.
func readRDTIME() uint64
