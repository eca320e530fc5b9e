package schedclock_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/schedclocktest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Deadlines on a clock's Instants that reach context (deadline.go).

// done reports whether ctx is done now, without waiting.
func done(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	default:
		return false
	}
}

// TestDeadlineOnAManualClock: a context whose deadline is a reading of a
// clock on a Manual counter is done when Advance passes the deadline, at
// once and not before; real time never ends it; its Deadline is the real
// time the deadline would pass at, never already past.
func TestDeadlineOnAManualClock(t *testing.T) {
	c, m := schedclocktest.NewManualClock(t)
	m.Advance(time.Hour)
	dl := c.Now().Add(time.Second)
	before := time.Now()
	ctx, cancel := c.WithDeadline(context.Background(), dl)
	after := time.Now()
	defer cancel()
	child, cancelChild := context.WithCancel(ctx)
	defer cancelChild()

	at, ok := ctx.Deadline()
	require.True(t, ok, "no Deadline")
	assert.False(t, at.Before(before.Add(time.Second)), "Deadline %v: before %v + 1s", at, before)
	assert.False(t, at.After(after.Add(time.Second)), "Deadline %v: after %v + 1s", at, after)
	assert.Equal(t, time.Second, c.Until(dl))

	time.Sleep(2 * time.Millisecond) // real time does not end it
	m.Advance(999_999_999 * time.Nanosecond)
	assert.False(t, done(ctx), "done a nanosecond before its deadline")
	assert.NoError(t, ctx.Err())
	assert.Equal(t, time.Nanosecond, c.Until(dl))
	m.Advance(time.Nanosecond)
	require.True(t, done(ctx), "not done when Advance reached its deadline")
	assert.Equal(t, context.DeadlineExceeded, ctx.Err())
	assert.Equal(t, context.DeadlineExceeded, context.Cause(ctx))
	assert.True(t, done(child), "a child made before is done with it")
	assert.Equal(t, context.DeadlineExceeded, child.Err(), "the child's Err")
	assert.Equal(t, time.Duration(0), c.Until(dl))
	m.Advance(time.Second)
	assert.Equal(t, -time.Second, c.Until(dl), "Until is negative past the deadline")
}

// TestDeadlineOnAManualClockEndsEachWay: Set past the deadline ends it as
// Advance does; WithTimeout is WithDeadline at Now plus the timeout; a
// deadline already passed is done at once; cancel, and the parent's
// cancel, end it with Canceled; context.AfterFunc runs after it ends.
func TestDeadlineOnAManualClockEndsEachWay(t *testing.T) {
	c, m := schedclocktest.NewManualClock(t)
	bg := context.Background()

	ctx, cancel := c.WithTimeout(bg, time.Minute)
	defer cancel()
	ran := make(chan struct{})
	context.AfterFunc(ctx, func() { close(ran) })
	m.Advance(59 * time.Second)
	assert.False(t, done(ctx))
	m.Set(uint64(60 * time.Second))
	require.True(t, done(ctx), "not done when Set reached its deadline")
	assert.Equal(t, context.DeadlineExceeded, ctx.Err())
	<-ran

	ctx, cancel = c.WithDeadline(bg, c.Now())
	defer cancel()
	assert.True(t, done(ctx), "a deadline already reached")
	assert.Equal(t, context.DeadlineExceeded, ctx.Err())

	ctx, cancel = c.WithTimeout(bg, time.Second)
	cancel()
	assert.True(t, done(ctx))
	assert.Equal(t, context.Canceled, ctx.Err())
	m.Advance(time.Hour)
	assert.Equal(t, context.Canceled, ctx.Err(), "a canceled context stays canceled")

	parent, cancelParent := context.WithCancel(bg)
	ctx, cancel = c.WithTimeout(parent, time.Second)
	defer cancel()
	cancelParent()
	<-ctx.Done()
	assert.Equal(t, context.Canceled, ctx.Err())

	// Values pass through; a parent's earlier deadline is reported.
	type key struct{}
	parent, cancelParent = context.WithTimeout(context.WithValue(bg, key{}, "v"), time.Hour)
	defer cancelParent()
	ctx, cancel = c.WithTimeout(parent, 2*time.Hour)
	defer cancel()
	assert.Equal(t, "v", ctx.Value(key{}))
	pd, _ := parent.Deadline()
	cd, _ := ctx.Deadline()
	assert.Equal(t, pd, cd, "the parent's deadline is the earlier")
}

// TestDeadlinesOnAManualClockAcrossClocks: a Manual with two clocks on it
// (each with its own origin) ends each context when its own clock
// reaches its deadline; nested deadlines end in their order.
func TestDeadlinesOnAManualClockAcrossClocks(t *testing.T) {
	m, err := schedclocktest.NewManual(1e9, 64)
	require.NoError(t, err)
	a, err := schedclock.New(m.Source())
	require.NoError(t, err)
	defer a.Close()
	m.Advance(time.Second)
	b, err := schedclock.New(m.Source()) // reads 0 where a reads 1 s
	require.NoError(t, err)
	defer b.Close()
	outer, cancel := a.WithDeadline(context.Background(), 3*schedclock.Instant(time.Second))
	defer cancel()
	inner, cancel := b.WithDeadline(outer, schedclock.Instant(time.Second))
	defer cancel()
	m.Advance(999 * time.Millisecond)
	assert.False(t, done(inner) || done(outer))
	m.Advance(time.Millisecond)
	assert.True(t, done(inner), "b reached its deadline")
	assert.False(t, done(outer), "a is a second short of its own")
	m.Advance(time.Second)
	assert.True(t, done(outer))
}

// TestDeadlineOnABubbleClock: in a testing/synctest bubble, a context
// whose deadline is a reading of a clock on Bubble ends when the
// bubble's time passes it, and not before.
func TestDeadlineOnABubbleClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := schedclocktest.NewBubbleClock(t)
		dl := c.Now().Add(time.Minute)
		ctx, cancel := c.WithDeadline(context.Background(), dl)
		defer cancel()
		at, ok := ctx.Deadline()
		assert.True(t, ok)
		assert.Equal(t, time.Now().Add(time.Minute), at, "the bubble's time of the deadline")
		bubbleSleep(time.Minute - time.Nanosecond)
		synctest.Wait()
		assert.False(t, done(ctx), "done before the bubble's time reached the deadline")
		<-ctx.Done()
		assert.False(t, c.Now().Before(dl), "done at %v, before the deadline %v", c.Now(), dl)
		assert.Equal(t, context.DeadlineExceeded, ctx.Err())
	})
}

// TestDeadlineOnTheDefaultClock: on the default clock (a nil *Clock is
// it) the context's deadline is the real time of the reading and the
// context ends when it passes (how closely: TestDeadlineOnTheDefaultClockIsOnTime).
func TestDeadlineOnTheDefaultClock(t *testing.T) {
	var c *schedclock.Clock
	before := time.Now()
	ctx, cancel := c.WithTimeout(context.Background(), time.Hour)
	after := time.Now()
	defer cancel()
	at, ok := ctx.Deadline()
	require.True(t, ok)
	assert.True(t, at.After(after), "Deadline %v: not after the call (%v)", at, after)
	assert.False(t, at.After(after.Add(time.Hour)), "Deadline %v: more than an hour after the call (%v)", at, after)
	assert.True(t, at.After(before.Add(59*time.Minute)), "Deadline %v: an hour after the call (%v)", at, before)

	dl := schedclock.Now().Add(2 * time.Millisecond)
	ctx, cancel = schedclock.Default().WithDeadline(context.Background(), dl)
	defer cancel()
	select {
	case <-ctx.Done():
	case <-time.After(time.Minute):
		t.Fatal("not done a minute after a deadline 2 ms away")
	}
	assert.Equal(t, context.DeadlineExceeded, ctx.Err())
	assert.LessOrEqual(t, schedclock.Until(dl), time.Duration(0), "done, the deadline ahead of the default clock")
}
