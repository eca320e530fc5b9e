//go:build !arm64 || !gc || purego

package schedclock

import "runtime"

// cntvctSupported reports whether this build has the CNTVCT assembly.
const cntvctSupported = false

// cntvctReader is never called when cntvctSupported is false: there is no
// counter to read in this build.
func cntvctReader() func() uint64 { return nil }

// cntfrq has no register to read in this build.
func cntfrq() uint64 { return 0 }

// cntvctUnsupportedReason says which half of the build tag excluded the
// assembly.
func cntvctUnsupportedReason() string {
	switch {
	case runtime.GOARCH != "arm64":
		return "not arm64 (GOARCH=" + runtime.GOARCH + ")"
	case runtime.Compiler != "gc":
		return "built with " + runtime.Compiler + ", not gc"
	}
	return "built with the purego tag"
}
