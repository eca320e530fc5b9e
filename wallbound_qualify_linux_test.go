package schedclock_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/internal/testenv"
)

// TestBoundedWallNowFollowsTheKernelsEstimate: with maxerror and esterror
// set as root (ADJ_MAXERROR, ADJ_ESTERROR) and STA_UNSYNC cleared, as a
// synchronisation daemon does, the bound follows them within the
// snapshot's second: never below the kernel's maxerror, above it by at
// most our step, a second's growth and the map's error; it grows 500 µs
// a second with the kernel's; set again lower, it follows down. The
// kernel's state is restored (STA_UNSYNC included) in Cleanup.
//
// In a process of its own: the qualification tests before it in this
// binary (the kernel's clocksource switched back and forth) leave the
// default clock's wall map disrupted many times over, which widens its
// bound beyond what this test states of a quiet machine.
func TestBoundedWallNowFollowsTheKernelsEstimate(t *testing.T) {
	testenv.Qualify(t)
	testenv.RequireRoot(t)
	onlyAdjtimex(t)
	inAProcessOfItsOwn(t, boundedWallNowFollowsTheKernelsEstimate)
}

func boundedWallNowFollowsTheKernelsEstimate(t *testing.T) {
	var orig unix.Timex
	_, err := unix.Adjtimex(&orig)
	require.NoError(t, err)
	// set sets maxerror, esterror and the status (Maxerror is an int32
	// on 386, an int64 elsewhere: set through reflect).
	set := func(maxErrUs, estErrUs int64, status int32) error {
		tx := unix.Timex{Modes: unix.ADJ_MAXERROR | unix.ADJ_ESTERROR | unix.ADJ_STATUS, Status: status}
		reflect.ValueOf(&tx.Maxerror).Elem().SetInt(maxErrUs)
		reflect.ValueOf(&tx.Esterror).Elem().SetInt(estErrUs)
		_, err := unix.Adjtimex(&tx)
		return err
	}
	t.Cleanup(func() {
		require.NoError(t, set(int64(orig.Maxerror), int64(orig.Esterror), orig.Status), "restoring the kernel's NTP state")
		var now unix.Timex
		_, err := unix.Adjtimex(&now)
		require.NoError(t, err)
		assert.Equal(t, orig.Status&unix.STA_UNSYNC, now.Status&unix.STA_UNSYNC, "STA_UNSYNC restored")
	})
	require.NoError(t, set(2000, 100, orig.Status&^unix.STA_UNSYNC))

	kernelMaxErr := func() time.Duration {
		var tx unix.Timex
		_, err := unix.Adjtimex(&tx)
		require.NoError(t, err)
		return time.Duration(tx.Maxerror) * time.Microsecond
	}
	waitFor := func(what string, ok func(schedclock.WallBound) bool) schedclock.WallBound {
		deadline := time.Now().Add(3 * time.Second)
		for {
			b := schedclock.BoundedWallNow()
			if ok(b) {
				return b
			}
			require.True(t, time.Now().Before(deadline), "%s: still %v", what, b)
			time.Sleep(10 * time.Millisecond)
		}
	}
	start := waitFor("synchronised", func(b schedclock.WallBound) bool { return b.Status() == schedclock.WallSynchronized })
	const slack = 500*time.Microsecond + 501*time.Microsecond + 50*time.Microsecond // our step, a second's growth, the map
	first, firstAt := halfWidth(start), time.Now()
	var last time.Duration
	for range 30 {
		m1 := kernelMaxErr()
		b := schedclock.BoundedWallNow()
		m2 := kernelMaxErr()
		h := halfWidth(b)
		assert.Equal(t, schedclock.WallSynchronized, b.Status(), "%v", b)
		assert.GreaterOrEqual(t, h, m2, "below the kernel's maxerror %v: %v", m2, b)
		assert.LessOrEqual(t, h, m1+slack, "more than the kernel's maxerror %v and the slack: %v", m1, b)
		last = h
		time.Sleep(100 * time.Millisecond)
	}
	elapsed := time.Since(firstAt)
	growth := last - first
	t.Logf("over %v the bound grew %v (%v to %v); the kernel's maxerror is %v", elapsed, growth, first, last, kernelMaxErr())
	want := time.Duration(float64(elapsed) * 500e-6)
	assert.InDelta(t, float64(want), float64(growth), float64(time.Millisecond), "500 µs a second")

	require.NoError(t, set(1000, 50, orig.Status&^unix.STA_UNSYNC))
	waitFor("set again lower", func(b schedclock.WallBound) bool { return halfWidth(b) < last-time.Millisecond })
	m1 := kernelMaxErr()
	b := schedclock.BoundedWallNow()
	m2 := kernelMaxErr()
	assert.GreaterOrEqual(t, halfWidth(b), m2, "below the kernel's maxerror %v: %v", m2, b)
	assert.LessOrEqual(t, halfWidth(b), m1+slack, "more than the kernel's maxerror %v and the slack: %v", m1, b)
	require.NoError(t, set(int64(orig.Maxerror), int64(orig.Esterror), orig.Status))
	b = waitFor("unsynchronised again", func(b schedclock.WallBound) bool { return b.Status() != schedclock.WallSynchronized })
	if orig.Status&unix.STA_UNSYNC != 0 {
		assert.Equal(t, schedclock.WallUnknown, b.Status())
	}
}
