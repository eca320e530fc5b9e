//go:build linux && !(gc && !purego && amd64)

package vdso

import "runtime"

// callerBuilt says that this build cannot call the vDSO: Now makes the
// system call.
const callerBuilt = false

func checkCaller() error { return nil }

// noCallerReason says why this build has no vDSO caller (the build
// constraint is the exact negation, within linux, of the callers').
func noCallerReason() string {
	switch {
	case runtime.Compiler != "gc":
		return "no vDSO caller in a " + runtime.Compiler + " build"
	case runtime.GOARCH == "amd64":
		return "purego build"
	}
	return "no vDSO caller for " + runtime.GOOS + "/" + runtime.GOARCH
}
