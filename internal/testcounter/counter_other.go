//go:build !(amd64 || arm64) || !gc || purego

package testcounter

// Supported reports whether this build has the readers: it has no
// hardware counter assembly.
const Supported = false

// ReadUnfenced is never called when Supported is false.
func ReadUnfenced() uint64 { return 0 }

// ReadSerialized is never called when Supported is false.
func ReadSerialized() uint64 { return 0 }
