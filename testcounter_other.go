//go:build !(amd64 || arm64) || !gc || purego

package schedclock

// testCountersSupported reports whether this build has the test-only
// counter readers: it has no hardware counter assembly.
const testCountersSupported = false

// readCounterUnfenced is never called when testCountersSupported is false.
func readCounterUnfenced() uint64 { return 0 }

// readCounterSerialized is never called when testCountersSupported is false.
func readCounterSerialized() uint64 { return 0 }
