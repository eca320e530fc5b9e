//go:build gc && !purego

package pvclock

// Supported reports whether this build has the assembly readers (Read
// and TSC).
const Supported = true

// Read is vread_pvclock in assembly (reader_amd64.s): ReadWith(TSC)
// without a Go call per step. ok is false when the page's stable bit is
// clear or the version kept changing for maxTries tries: the caller
// falls back, as the vDSO falls back to the system call.
//
//go:noescape
func Read(pg *Page) (ns uint64, ok bool)

// TSC reads the time-stamp counter ordered after every earlier load
// (LFENCE; RDTSC, the kernel's rdtsc_ordered), the TSC read the readers
// need.
func TSC() uint64
