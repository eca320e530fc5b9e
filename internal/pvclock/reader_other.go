//go:build !amd64 || !gc || purego

package pvclock

// Supported reports whether this build has the assembly readers (Read
// and TSC): only amd64 gc builds without the purego tag have an x86 TSC
// to read.
const Supported = false

// Read is never called when Supported is false; it reports !ok.
func Read(pg *Page) (ns uint64, version uint32, ok bool) { return 0, 0, false }

// TSC is never called when Supported is false; it returns 0.
func TSC() uint64 { return 0 }
