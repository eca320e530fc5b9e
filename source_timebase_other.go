//go:build !ppc64le || !gc || purego

package schedclock

// timebaseSupported reports whether this build has the time base assembly.
const timebaseSupported = false

// timebaseReader is never called when timebaseSupported is false: there
// is no counter to read in this build.
func timebaseReader() func() uint64 { return nil }

// timebaseUnsupportedReason says why this build has no assembly for the
// counter.
func timebaseUnsupportedReason() string { return noAsmReason("ppc64le") }
