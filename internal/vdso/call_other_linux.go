//go:build linux && !(gc && !purego && (amd64 || (arm64 && go1.26 && !go1.27)))

package vdso

import (
	"runtime"
	"strings"
)

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
	case runtime.GOARCH == "arm64" && strings.HasPrefix(runtime.Version(), "go1.26"):
		return "purego build"
	case runtime.GOARCH == "arm64":
		// call_linux_arm64.s stores g where the signal handler looks for
		// it through the runtime's struct offsets, verified for go1.26.
		return "no vDSO caller for " + runtime.Version() + ": the arm64 caller is verified against go1.26's runtime layout only"
	}
	return "no vDSO caller for " + runtime.GOOS + "/" + runtime.GOARCH
}
