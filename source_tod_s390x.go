//go:build gc && !purego

package schedclock

// This build reads the TOD clock in assembly: see source_readers.go.
const asmBuild = true

var asm = asmReaders{tod: readTOD}

// readTOD stores the TOD clock (STCKF) between two serialisations, so a
// counter value is neither older than the latch bank it is combined with
// nor newer than the seq re-check that validates that bank.
func readTOD() uint64
