//go:build !(linux && gc && !purego && (amd64 || (arm64 && go1.26 && !go1.27)))

package vdso

// callClockGettime is never called in this build (no Clock has an
// entry); it fails as a vDSO without the clock would.
func callClockGettime(entry uintptr, clockid int32) (ns int64, ret int32) { return 0, -1 }
