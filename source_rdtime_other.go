//go:build !riscv64 || !gc || purego

package schedclock

// rdtimeSupported reports whether this build has the RDTIME assembly.
const rdtimeSupported = false

// rdtimeReader is never called when rdtimeSupported is false: there is
// no counter to read in this build.
func rdtimeReader() func() uint64 { return nil }

// rdtimeUnsupportedReason says why this build has no assembly for the
// counter.
func rdtimeUnsupportedReason() string { return noAsmReason("riscv64") }
