//go:build linux || darwin || dragonfly || freebsd || openbsd || solaris

package vdso

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSyscallReadsTheWallClock: Syscall(Realtime) lies between two
// time.Now readings of the same clock, and an ID no system knows fails.
func TestSyscallReadsTheWallClock(t *testing.T) {
	before := time.Now().UnixNano()
	ns, ok := Syscall(Realtime)
	after := time.Now().UnixNano()
	require.True(t, ok, "clock_gettime(CLOCK_REALTIME) failed")
	assert.LessOrEqual(t, before, ns, "Syscall(Realtime) before the time.Now read before it")
	assert.LessOrEqual(t, ns, after, "Syscall(Realtime) after the time.Now read after it")
	_, ok = Syscall(ID(1 << 20))
	assert.False(t, ok, "a clock id no system has")
}
