package schedclock_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/schedclock/schedclock"
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
