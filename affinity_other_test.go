//go:build !linux

package schedclock

import (
	"runtime"
	"testing"
)

// testCPUs says, with t.Log, that threads cannot be pinned here: the
// ordering tests then run unpinned, with the counts for one CPU.
func testCPUs(t *testing.T) (cpus [2]int, two bool) {
	t.Logf("threads cannot be pinned to CPUs on %s: they run unpinned, and cross-CPU reordering is not asserted", runtime.GOOS)
	return [2]int{-1, -1}, false
}

// lockToCPU locks the calling goroutine to its thread; there is no
// affinity to set on this system.
func lockToCPU(t *testing.T, cpu int) (unpin func()) {
	runtime.LockOSThread()
	return func() {}
}

// yieldCPU is never needed here: threads are never pinned together.
func yieldCPU() { runtime.Gosched() }
