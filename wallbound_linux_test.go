package schedclock_test

import (
	"context"
	"errors"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/internal/testenv"
)

// onlyAdjtimex skips t where a better source than adjtimex is present:
// what these tests compare is the kernel's own estimate.
func onlyAdjtimex(t *testing.T) {
	t.Helper()
	for _, path := range []string{"/dev/vmclock0", "/var/run/clockbound/shm0"} {
		if _, err := os.Stat(path); err == nil {
			t.Skipf("%s is here: the bound is not adjtimex's", path)
		}
	}
}

// halfWidth is a reading's half-width.
func halfWidth(b schedclock.WallBound) time.Duration { return b.Latest().Sub(b.Earliest()) / 2 }

// TestBoundedWallNowOnThisMachine: with neither vmclock nor ClockBound,
// the bound is adjtimex's: an unsynchronised kernel (STA_UNSYNC, as on a
// machine no daemon disciplines) gives status unknown with a bound of at
// least the kernel's maxerror (16 s); a synchronised one, status
// synchronized and at least maxerror plus one 500 µs step.
func TestBoundedWallNowOnThisMachine(t *testing.T) {
	onlyAdjtimex(t)
	var before unix.Timex
	_, err := unix.Adjtimex(&before)
	require.NoError(t, err)
	b := schedclock.BoundedWallNow()
	var after unix.Timex
	_, err = unix.Adjtimex(&after)
	require.NoError(t, err)
	t.Logf("adjtimex: maxerror %d µs, status %#x; %v", after.Maxerror, after.Status, b)
	assert.Equal(t, "adjtimex", b.Source())
	maxErr := time.Duration(min(before.Maxerror, after.Maxerror)) * time.Microsecond
	assert.GreaterOrEqual(t, halfWidth(b), maxErr)
	if before.Status&unix.STA_UNSYNC != 0 && after.Status&unix.STA_UNSYNC != 0 {
		assert.Equal(t, schedclock.WallUnknown, b.Status())
		assert.Contains(t, b.Reason(), "STA_UNSYNC")
		err := schedclock.WaitUntilPast(context.Background(), time.Now())
		assert.ErrorIs(t, err, schedclock.ErrNoWallBound, "commit-wait without a bound")
	} else if before.Status&unix.STA_UNSYNC == 0 && after.Status&unix.STA_UNSYNC == 0 {
		assert.NotEqual(t, schedclock.WallUnknown, b.Status())
		assert.GreaterOrEqual(t, halfWidth(b), maxErr+500*time.Microsecond)
	}
}

// TestBoundedWallNowFollowsTheKernelsEstimate: with maxerror and esterror
// set as root (ADJ_MAXERROR, ADJ_ESTERROR) and STA_UNSYNC cleared, as a
// synchronisation daemon does, the bound follows them within the
// snapshot's second: never below the kernel's maxerror, above it by at
// most our step, a second's growth and the map's error; it grows 500 µs
// a second with the kernel's; set again lower, it follows down. The
// kernel's state is restored (STA_UNSYNC included) in Cleanup.
func TestBoundedWallNowFollowsTheKernelsEstimate(t *testing.T) {
	testenv.Qualify(t)
	testenv.RequireRoot(t)
	onlyAdjtimex(t)
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

// TestWaitUntilPastHere: where the kernel gives a bound, WaitUntilPast
// returns once a reading is definitely after t (here the bound is
// milliseconds: it waits about that long); where it gives none, it says
// so at once.
func TestWaitUntilPastHere(t *testing.T) {
	onlyAdjtimex(t)
	b := schedclock.BoundedWallNow()
	target := time.Now()
	start := time.Now()
	err := schedclock.WaitUntilPast(context.Background(), target)
	if b.Status() == schedclock.WallUnknown {
		assert.True(t, errors.Is(err, schedclock.ErrNoWallBound), "%v", err)
		return
	}
	require.NoError(t, err)
	assert.True(t, schedclock.BoundedWallNow().After(target))
	assert.GreaterOrEqual(t, time.Since(start), halfWidth(b)-time.Millisecond)
}
