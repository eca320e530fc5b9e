//go:build !arm64 || !gc || purego

package schedclock

import "github.com/schedclock/schedclock/internal/errata"

// cntvctSupported reports whether this build has the CNTVCT assembly.
const cntvctSupported = false

// cntvctReader is never called when cntvctSupported is false: there is no
// counter to read in this build.
func cntvctReader() func() uint64 { return nil }

// cntfrq has no register to read in this build.
func cntfrq() uint64 { return 0 }

// cntvctUnsupportedReason says why this build has no assembly for the counter.
func cntvctUnsupportedReason() string { return noAsmReason("arm64") }

// cntvctErratumReader has no counter to read in this build.
func cntvctErratumReader(errata.Erratum) func() uint64 { return nil }
