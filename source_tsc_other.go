//go:build !amd64 || !gc || purego

package schedclock

// tscSupported reports whether this build has the TSC assembly.
const tscSupported = false

// tscReader is never called when tscSupported is false: there is no
// counter to read in this build.
func tscReader() func() uint64 { return nil }

// tscUnsupportedReason says why this build has no assembly for the counter.
func tscUnsupportedReason() string { return noAsmReason("amd64") }
