//go:build !arm64 || !gc || purego

package schedclock

// cntvctErratumReader has no counter to read in this build.
func cntvctErratumReader(cntvctErratum) func() uint64 { return nil }
