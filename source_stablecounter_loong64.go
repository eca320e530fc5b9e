//go:build gc && !purego

package schedclock

// This build reads the stable counter in assembly: see source_readers.go.
const asmBuild = true

var asm = asmReaders{stableCounter: readStableCounter, cpucfg: readCPUCFG}

// readStableCounter reads the stable counter after a full barrier and
// orders every later load after it (a dependent load and a barrier), so
// a counter value is neither older than the latch bank it is combined
// with nor newer than the seq re-check that validates that bank.
func readStableCounter() uint64

// readCPUCFG returns the CPUCFG word of leaf.
func readCPUCFG(leaf uint32) uint32
