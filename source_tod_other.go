//go:build !s390x || !gc || purego

package schedclock

// todSupported reports whether this build has the TOD assembly.
const todSupported = false

// todReader is never called when todSupported is false: there is no
// counter to read in this build.
func todReader() func() uint64 { return nil }

// todUnsupportedReason says why this build has no assembly for the
// counter.
func todUnsupportedReason() string { return noAsmReason("s390x") }
