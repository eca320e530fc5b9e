//go:build linux && gc && !purego && go1.26 && !go1.27

package vdso

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func gSlotNow() uintptr { return gSlot() }

// shiftedCall: arm64 keeps SP 16-byte aligned (AAPCS64), there is no
// other alignment to run at; the frame's top is what is unaligned.
var shiftedCall = callClockGettime

// The layout check passes here, on every thread the test lands on.
func TestCheckCaller(t *testing.T) {
	for range 20 {
		require.NoError(t, checkCaller())
		runtime.Gosched()
	}
	lo, hi, gm, gsignalM := gsignalStack()
	assert.NotZero(t, gm)
	assert.Equal(t, gm, gsignalM)
	assert.Equal(t, uintptr(32<<10), hi-lo, "the runtime's gsignal stack is 32 KiB (malg(32*1024) in mpreinit)")
}

// A mismatch in any field the offsets give is refused.
func TestCompareSignalStack(t *testing.T) {
	ss := stackT{sp: 0x1000, size: 0x8000}
	require.NoError(t, compareSignalStack(ss, 0x1000, 0x9000, 0x50, 0x50))
	for name, err := range map[string]error{
		"disabled":   compareSignalStack(stackT{sp: 0x1000, size: 0x8000, flags: ssDisable}, 0x1000, 0x9000, 0x50, 0x50),
		"other lo":   compareSignalStack(ss, 0x2000, 0x9000, 0x50, 0x50),
		"other size": compareSignalStack(ss, 0x1000, 0xa000, 0x50, 0x50),
		"no m":       compareSignalStack(ss, 0x1000, 0x9000, 0, 0),
		"gsignal.m":  compareSignalStack(ss, 0x1000, 0x9000, 0x50, 0x60),
	} {
		assert.ErrorIs(t, err, errGSlot, name)
	}
}
