//go:build linux

package pvclock

import (
	"errors"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/vdso"
)

// On this machine the vDSO time data is found, and its stamp moves with
// the kernel's coarse clock: every time CLOCK_MONOTONIC_COARSE (read by
// a system call) moves, the stamp has moved too by the time it moves
// again (the kernel publishes its timekeeper a few microseconds before
// the vDSO's copy).
func TestProbeTimeDataFollowsTheKernelsTicks(t *testing.T) {
	maps, err := Maps()
	require.NoError(t, err)
	td, coarse, err := ProbeTimeData(maps)
	if errors.Is(err, ErrNoPage) && !hasVvar(maps) {
		t.Skip(err.Error()) // qemu-user, which maps no [vvar]
	}
	require.NoError(t, err)
	l, ok := td.Layout(coarse)
	require.True(t, ok, "the conversion around the coarse base at %d", coarse)
	_, ok = td.Load(l)
	require.True(t, ok)
	coarseNow := func() int64 {
		var ts syscall.Timespec
		_, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonicCoarse, uintptr(unsafe.Pointer(&ts)), 0)
		require.Zero(t, errno)
		return ts.Nano()
	}
	var stamps []uint64
	last := coarseNow()
	for deadline := time.Now().Add(5 * time.Second); len(stamps) < 6 && time.Now().Before(deadline); {
		if c := coarseNow(); c != last {
			last = c
			stamps = append(stamps, td.Stamp())
		}
	}
	require.Len(t, stamps, 6, "CLOCK_MONOTONIC_COARSE moved fewer than 6 times in 5 s")
	for i := 2; i < len(stamps); i++ {
		assert.NotEqual(t, stamps[i-2], stamps[i], "two ticks of CLOCK_MONOTONIC_COARSE, one stamp: %x", stamps)
	}
}

func hasVvar(maps []Mapping) bool {
	for _, m := range maps {
		if m.Name == "[vvar]" {
			return true
		}
	}
	return false
}

// TestRawConvIsTheKernelsRawClock: on this machine the raw clock base is
// found, converts the counter of the clock mode the kernel runs in (the
// TSC, or the pvclock page's time), and its conversion of a counter
// value read between two vDSO reads of CLOCK_MONOTONIC_RAW lies between
// them, to the ns the two round to.
func TestRawConvIsTheKernelsRawClock(t *testing.T) {
	maps, err := Maps()
	require.NoError(t, err)
	td, coarse, err := ProbeTimeData(maps)
	if errors.Is(err, ErrNoPage) && !hasVvar(maps) {
		t.Skip(err.Error()) // qemu-user, which maps no [vvar]
	}
	require.NoError(t, err)
	l, ok := td.Layout(coarse)
	require.True(t, ok)
	var counter func() uint64
	raw, err := vdso.Open(vdso.MonotonicRaw)
	require.NoError(t, err)
	for range 100 {
		r, ok := td.Raw(l)
		if !ok {
			continue // an update in flight
		}
		if counter == nil {
			switch {
			case !Supported:
				t.Skip("no TSC reader in this build")
			case r.Mode == ModeTSC:
				counter = TSC
			case r.Mode == ModePvclock:
				pg, _, _ := realPage(t)
				counter = func() uint64 { ns, _, _ := Read(pg); return ns }
			default:
				t.Skipf("the kernel runs in vDSO clock mode %d, whose counter this test cannot read", r.Mode)
			}
			t.Logf("raw clock: %+v", r)
		}
		before := raw.Now()
		cyc := counter()
		after := raw.Now()
		at := r.At(cyc)
		assert.LessOrEqual(t, before-1, at)
		assert.LessOrEqual(t, at, after+1)
	}
	require.NotNil(t, counter, "the raw clock base was never read")
}
