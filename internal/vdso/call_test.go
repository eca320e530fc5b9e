//go:build linux && gc && !purego && (amd64 || (arm64 && go1.26 && !go1.27))

package vdso

import (
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The C stack the call guarantees below the probe's entry SP: the frame
// less the timespec, the 15 bytes alignment may cost and amd64's return
// address.
const minCalleeStack = reservedFrame - 16 - 15 - 8

// probeAt calls the probe through callClockGettime from depth frames
// further down the goroutine stack, from an SP shifted by 8 if shifted.
//
//go:noinline
func probeAt(depth int, clockid int32, shifted bool) (ns int64, ret int32, seen [5]uintptr) {
	if depth > 0 {
		return probeAt(depth-1, clockid, shifted)
	}
	call := callClockGettime
	if shifted {
		call = shiftedCall
	}
	// A word of this frame, which lies above the call's: the C stack
	// must stay below it, inside the call's own frame.
	var callerWord uintptr
	ns, ret = call(abiProbeAddr(), clockid)
	return ns, ret, [5]uintptr{probe.entrySP, probe.goSP, probe.slot, probe.g, uintptr(unsafe.Pointer(&callerWord))}
}

// TestABIProbe calls a C-ABI probe through the very function that calls
// the vDSO, and checks what the C side sees: the arguments, the result,
// a 16-byte aligned stack (SysV: RSP+8 at entry; AAPCS64: SP), inside the
// reserved frame with at least minCalleeStack bytes below it, the Go SP
// kept in a callee-saved register, and on arm64 g in the g slot during
// the call and the slot cleared after it.
func TestABIProbe(t *testing.T) {
	entryAlign := uintptr(8) // the CALL pushed the return address
	frameBottom := uintptr(0)
	if runtime.GOARCH == "arm64" {
		entryAlign = 0
		frameBottom = 8 // above the saved LR
	}
	// Whether the frame's top less the timespec was ever unaligned: if
	// it never were, a call without the alignment step would pass.
	sawUnalignedTop := false
	for i := range 16 {
		// Each depth twice, once shifted: both SP alignments mod 16,
		// whatever the frames above add up to.
		depth, shifted := i/2, i%2 == 1
		clockid := int32(4 + i)
		ns, ret, seen := probeAt(depth, clockid, shifted)
		entrySP, goSP := seen[0], seen[1]
		sawUnalignedTop = sawUnalignedTop || (goSP+frameBottom+reservedFrame-16)%16 != 0
		assert.Equal(t, int64(clockid)*1e9+123456789, ns, "depth %d: the timespec read back", depth)
		assert.Equal(t, -clockid, ret, "depth %d: the return value", depth)
		assert.Equal(t, entryAlign, entrySP%16, "depth %d: SP at the C function's entry %#x (Go SP %#x) is not 16-byte aligned as the C ABI requires", depth, entrySP, goSP)
		require.Greater(t, entrySP, goSP, "depth %d: the C function's stack (SP %#x) is not inside the reserved frame above the Go SP %#x", depth, entrySP, goSP)
		assert.GreaterOrEqual(t, entrySP-(goSP+frameBottom), uintptr(minCalleeStack), "depth %d: the C function gets %d bytes of the reserved frame, want at least %d", depth, entrySP-goSP-frameBottom, minCalleeStack)
		assert.LessOrEqual(t, entrySP+16+entryAlign, goSP+frameBottom+reservedFrame, "depth %d: the timespec at %#x overruns the reserved frame [%#x, +%d)", depth, entrySP+entryAlign, goSP+frameBottom, reservedFrame)
		assert.Less(t, entrySP+16+entryAlign, seen[4], "depth %d: the timespec at %#x is not below the caller's frame (%#x): the frame the prologue reserved is smaller than the C stack", depth, entrySP+entryAlign, seen[4])
		if runtime.GOARCH == "arm64" {
			slot, g := seen[2], seen[3]
			assert.NotZero(t, g)
			assert.Equal(t, g, slot, "depth %d: the g slot (g.m.gsignal.stack.lo) holds %#x during the call, not g %#x", depth, slot, g)
			assert.Zero(t, gSlotNow(), "depth %d: the g slot is not cleared after the call", depth)
		}
	}
	require.True(t, sawUnalignedTop, "the reserved frame's top was 16-byte aligned at every depth: a missing alignment step would pass unseen")
}

// TestCalleeStackUse measures how much of the reserved frame the vDSO's
// clock_gettime overwrites, for each clock, and checks the margin.
func TestCalleeStackUse(t *testing.T) {
	entry, path := defaultEntry()
	if entry == 0 {
		t.Skip(path)
	}
	for _, id := range []ID{Realtime, Monotonic, MonotonicRaw, MonotonicCoarse, Boottime} {
		var most uintptr
		var avail uintptr
		for range 1000 {
			ns, ret, used, av := callClockGettimeMeasured(entry, int32(id))
			require.Zero(t, ret, "%v", id)
			require.Positive(t, ns, "%v", id)
			most, avail = max(most, used), av
		}
		t.Logf("%v: the vDSO used %d of %d bytes of stack (%s)", id, most, avail, path)
		assert.GreaterOrEqual(t, avail, uintptr(minCalleeStack))
		assert.Less(t, most, avail/4, "%v: the vDSO used %d of %d bytes: the margin is gone", id, most, avail)
	}
}

// The measured call sees a callee's writes: the probe writes only its
// timespec and (amd64) the return address the CALL pushed.
func TestMeasuredCallSeesTheCallee(t *testing.T) {
	_, ret, used, avail := callClockGettimeMeasured(abiProbeAddr(), 4)
	require.Equal(t, int32(-4), ret)
	want := uintptr(8) // the return address
	if runtime.GOARCH == "arm64" {
		want = 0 // BL leaves it in LR
	}
	assert.Equal(t, want, used)
	assert.GreaterOrEqual(t, avail, uintptr(minCalleeStack))
}

// BenchmarkCallOverhead is the call without the vDSO: the probe as the C
// function, so what remains is the frame, the SP moves and the ABI0 call.
func BenchmarkCallOverhead(b *testing.B) {
	entry := abiProbeAddr()
	var sum int64
	for b.Loop() {
		ns, _ := callClockGettime(entry, 4)
		sum += ns
	}
	sinkInternal = sum
}

var sinkInternal int64
