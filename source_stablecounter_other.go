//go:build !loong64 || !gc || purego

package schedclock

// stableCounterSupported reports whether this build has the stable
// counter assembly.
const stableCounterSupported = false

// stableCounterReader is never called when stableCounterSupported is
// false: there is no counter to read in this build.
func stableCounterReader() func() uint64 { return nil }

// cpucfg has no instruction to run in this build.
func cpucfg(uint32) uint32 { return 0 }

// stableCounterUnsupportedReason says why this build has no assembly for
// the counter.
func stableCounterUnsupportedReason() string { return noAsmReason("loong64") }
