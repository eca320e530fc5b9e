//go:build !(amd64 || arm64) || !gc || purego

package schedclock

// orderAfter has no assembly in this build: the portable source's read is
// ordered before a latch's seq re-check only as far as the platform's
// memory model and the runtime's clock read order it.
func orderAfter(uint64) {}
