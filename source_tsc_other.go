//go:build !amd64 || !gc || purego

package schedclock

import "runtime"

// tscSupported reports whether this build has the TSC assembly.
const tscSupported = false

// tscReader is never called when tscSupported is false: there is no
// counter to read in this build.
func tscReader() func() uint64 { return nil }

// tscNow never applies in this build.
func tscNow(*latch) (int64, bool) { return 0, false }

// hostCPUID has no CPUID instruction to run in this build.
func hostCPUID(eax, ecx uint32) (a, b, c, d uint32) { return 0, 0, 0, 0 }

// tscUnsupportedReason says which half of the build tag excluded the
// assembly.
func tscUnsupportedReason() string {
	switch {
	case runtime.GOARCH != "amd64":
		return "not amd64 (GOARCH=" + runtime.GOARCH + ")"
	case runtime.Compiler != "gc":
		return "built with " + runtime.Compiler + ", not gc"
	}
	return "built with the purego tag"
}
