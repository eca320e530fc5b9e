//go:build gc && !purego

package schedclock

// tscSupported reports whether this build has the TSC assembly.
const tscSupported = true

// readTSC reads the time-stamp counter after every earlier load has
// completed (LFENCE; RDTSC, the kernel's rdtsc_ordered), so a counter value
// is never older than the latch bank it is combined with, and orders every
// later load after the read (a dependent load), so it is never newer than
// the seq re-check that validates that bank. See source_tsc_amd64.s.
func readTSC() uint64

// cpuidAsm executes CPUID with the given EAX (leaf) and ECX (sub-leaf).
func cpuidAsm(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)

func tscReader() func() uint64 { return readTSC }

// tscNow is Clock.Now's path for a latch that reads the TSC (see
// source_tsc_amd64.s and the tscState values).
func tscNow(l *latch) (ns int64, cyc, seq uint64, state uint8)

// tscReadPtr identifies readTSC in a bank's read field; tscNow compares
// against it.
//
//lint:ignore U1000 read by tscNow in source_tsc_amd64.s
var tscReadPtr = funcPtr(readTSC)

func hostCPUID(eax, ecx uint32) (a, b, c, d uint32) { return cpuidAsm(eax, ecx) }

func tscUnsupportedReason() string { return "" }
