//go:build !amd64 || !gc || purego

package schedclock

// tscSupported reports whether this build has the TSC assembly.
const tscSupported = false

// tscReader is never called when tscSupported is false: there is no
// counter to read in this build.
func tscReader() func() uint64 { return nil }

// tscNow never applies in this build.
func tscNow(*latch) (ns int64, cyc, seq uint64, state uint8) { return 0, 0, 0, tscOther }

// hostCPUID has no CPUID instruction to run in this build.
func hostCPUID(eax, ecx uint32) (a, b, c, d uint32) { return 0, 0, 0, 0 }

// tscUnsupportedReason says why this build has no assembly for the counter.
func tscUnsupportedReason() string { return noAsmReason("amd64") }
