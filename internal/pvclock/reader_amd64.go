//go:build gc && !purego

package pvclock

// Supported reports whether this build has the assembly readers (Read
// and TSC).
const Supported = true

// Read is vread_pvclock in assembly (reader_amd64.s): ReadWith(TSC)
// without a Go call per step, with its rules (no motion below the
// stamp). ok is false when the page's stable bit is clear, its scale
// cannot be the hypervisor's, or the version kept changing for maxTries
// tries: the caller falls back, as the vDSO falls back to the system
// call. version is the version the reading was made under.
//
//go:noescape
func Read(pg *Page) (ns uint64, version uint32, ok bool)

// TSC reads the time-stamp counter ordered after every earlier load
// (LFENCE; RDTSC, the kernel's rdtsc_ordered), the TSC read the readers
// need.
func TSC() uint64
