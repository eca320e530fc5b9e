//go:build gc && !purego

package schedclock

// todSupported reports whether this build has the TOD assembly.
const todSupported = true

// readTOD stores the TOD clock (STCKF) between two serialisations, so a
// counter value is neither older than the latch bank it is combined with
// nor newer than the seq re-check that validates that bank.
func readTOD() uint64

func todReader() func() uint64 { return readTOD }

func todUnsupportedReason() string { return "" }
