//go:build gc && !purego

package schedclock

// rdtimeSupported reports whether this build has the RDTIME assembly.
const rdtimeSupported = true

// readRDTIME reads the time CSR after every earlier load and before every
// later one (a fence on each side), so a counter value is neither older
// than the latch bank it is combined with nor newer than the seq re-check
// that validates that bank.
func readRDTIME() uint64

func rdtimeReader() func() uint64 { return readRDTIME }

func rdtimeUnsupportedReason() string { return "" }
