package schedclock_test

import (
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
)

// Source (source.go): what New and Register refuse, the portable
// source, and the names of the rate's origins.

// TestPortable: the portable source counts Go's monotonic clock in
// nanoseconds, so that over any interval it advances by what time.Since
// measures around it.
func TestPortable(t *testing.T) {
	src := schedclock.Portable()
	assert.Equal(t, "portable", src.Name)
	assert.Equal(t, 63, src.Bits) // the runtime's nanotime is an int64
	assert.Equal(t, uint64(1e9), src.Rate)
	require.NotNil(t, src.Read)
	outer := time.Now()
	first := src.Read()
	inner := time.Now()
	innerEnd := time.Now()
	for !innerEnd.After(inner) { // at least one step of the monotonic clock
		innerEnd = time.Now()
	}
	last := src.Read()
	outerEnd := time.Now()
	// Both clocks are the runtime's monotonic clock: the source's advance
	// lies within the brackets' however loaded the machine is.
	assert.GreaterOrEqual(t, time.Duration(last-first), innerEnd.Sub(inner), "slower than the monotonic clock")
	assert.LessOrEqual(t, time.Duration(last-first), outerEnd.Sub(outer), "faster than the monotonic clock")
	c, err := schedclock.New(src)
	require.NoError(t, err)
	require.NoError(t, c.Close())
}

func TestInvalidSourcesAreRefused(t *testing.T) {
	f := &schedclock.FakeCounter{}
	for name, src := range map[string]schedclock.Source{
		"nil read":  {Name: "x", Bits: 64, Rate: ghz},
		"0 bits":    f.Source("x", 0, ghz),
		"65 bits":   f.Source("x", 65, ghz),
		"-1 bits":   f.Source("x", -1, ghz),
		"0 Hz":      f.Source("x", 64, 0),
		"too fast":  f.Source("x", 1, ghz), // a 1-bit counter at 1 GHz wraps every 2 ns
		"rate 2^64": f.Source("x", 64, ^uint64(0)),
	} {
		c, err := schedclock.New(src)
		assert.Nil(t, c, name)
		assert.ErrorIs(t, err, schedclock.ErrInvalidSource, name)
	}

	// A refused Register changes nothing.
	c, fc := newFake(t, 64, ghz)
	fc.Add(1000)
	before := c.Info()
	for _, src := range []schedclock.Source{{Name: "nil", Bits: 64, Rate: 2 * ghz}, f.Source("x", 65, 2*ghz), f.Source("x", 64, 0)} {
		assert.ErrorIs(t, c.Register(src), schedclock.ErrInvalidSource)
	}
	assert.Equal(t, before, c.Info())
	assert.Equal(t, schedclock.Instant(1000), c.Now())
	fc.Add(1)
	assert.Equal(t, schedclock.Instant(1001), c.Now())
}

// TestHardwareIsThisArchitecturesCounter: Hardware returns this
// architecture's counter register, or its refusal, and on an
// architecture without one an error wrapping ErrUnsupported.
func TestHardwareIsThisArchitecturesCounter(t *testing.T) {
	src, err := schedclock.Hardware()
	own, ok := map[string]func() (schedclock.Source, error){
		"amd64": schedclock.TSC, "arm64": schedclock.CNTVCT, "riscv64": schedclock.RDTIME,
		"ppc64le": schedclock.TimeBase, "s390x": schedclock.TOD, "loong64": schedclock.StableCounter,
	}[runtime.GOARCH]
	if !ok {
		require.ErrorIs(t, err, schedclock.ErrUnsupported)
		assert.Contains(t, err.Error(), runtime.GOARCH)
		return
	}
	want, wantErr := own()
	if wantErr != nil {
		require.Error(t, err)
		assert.Equal(t, wantErr.Error(), err.Error())
		assert.ErrorIs(t, err, schedclock.ErrUnsupported, "a refusal, untrusted ones included, is an ErrUnsupported")
		return
	}
	require.NoError(t, err)
	assert.Equal(t, want.Name, src.Name)
	assert.Equal(t, want.Bits, src.Bits)
	// Where the rate is measured (no register or firmware gives it), two
	// calls measure it twice: the same to well within 0.1%.
	assert.InEpsilon(t, float64(want.Rate), float64(src.Rate), 1e-3)
	a := src.Read()
	b := want.Read()
	assert.LessOrEqual(t, a, b, "Hardware's Read is the same counter, read before")
}

// TestTimeOfAReadingNeverChanges: a Clock on a Source that reads the
// testing/synctest bubble's clock (built by hand here, as a user would)
// runs 30 minutes of bubble time while the real wall clock moves by
// milliseconds: the wall time of a reading taken at the start must not
// move.
func TestTimeOfAReadingNeverChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		c, err := schedclock.New(schedclock.Source{
			Name: "by hand", Bits: 64, Rate: 1e9,
			Read: func() uint64 { return uint64(time.Since(start)) },
		})
		require.NoError(t, err)
		defer c.Close()
		r0 := c.Now()
		t0 := c.WallTime(r0)
		bubbleSleep(30 * time.Minute)
		r1 := c.Now()
		assert.Equal(t, 30*time.Minute, time.Duration(r1-r0))
		_ = c.WallTime(r1)
		assert.Equal(t, t0, c.WallTime(r0), "Time(r0) after 30 min of bubble sleep")
	})
}

// TestWallTimeFollowsABubblesClock: a Clock made in a testing/synctest
// bubble on a Source that reads the bubble's clock (built by hand, as a
// user would) maps its readings onto the bubble's wall clock, as a Clock
// on Bubble does: two readings 30 minutes of bubble time apart map 30
// minutes apart, and a reading maps to the bubble's time.Now when it
// was taken (to within a microsecond: the map is paired, not exact).
func TestWallTimeFollowsABubblesClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		c, err := schedclock.New(schedclock.Source{
			Name: "by hand", Bits: 64, Rate: 1e9,
			Read: func() uint64 { return uint64(time.Since(start)) },
		})
		require.NoError(t, err)
		defer c.Close()
		r0 := c.Now()
		t0 := c.WallTime(r0)
		now0 := time.Now()
		bubbleSleep(30 * time.Minute)
		r1 := c.Now()
		t1 := c.WallTime(r1)
		now1 := time.Now()
		assert.Equal(t, 30*time.Minute, time.Duration(r1-r0))
		assert.InDelta(t, float64(30*time.Minute), float64(t1.Sub(t0)), float64(time.Microsecond), "readings 30 min apart map %v apart", t1.Sub(t0))
		assert.InDelta(t, float64(now0.UnixNano()), float64(t0.UnixNano()), float64(time.Microsecond), "WallTime %v, the bubble's time.Now %v", t0, now0)
		assert.InDelta(t, float64(now1.UnixNano()), float64(t1.UnixNano()), float64(time.Microsecond), "WallTime %v, the bubble's time.Now %v", t1, now1)
	})
}

// TestAReferenceInABubbleIsCheckedAgainstTheBubble: a Clock made in a
// testing/synctest bubble on a Source and a reference that read the
// bubble's clock (built by hand, as a user would) checks the reference
// against the bubble's clock too, not the runtime's (which hardly moves
// while the bubble's hours pass): the reference agrees, the clock
// refines its counter's rate, declared 30 ppm off, to the truth, and
// keeps the reference's pace.
func TestAReferenceInABubbleIsCheckedAgainstTheBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		ref := func() int64 { return int64(time.Since(start)) }
		c, err := schedclock.New(schedclock.Source{
			Name: "by hand", Bits: 64, Rate: 1_000_030_000,
			Read: func() uint64 { return uint64(time.Since(start)) },
		}, schedclock.WithReference(ref))
		require.NoError(t, err)
		defer c.Close()
		bubbleSleep(time.Minute)
		in := c.Info()
		assert.Empty(t, in.Watch.Reference, "the reference, as the clock judged it")
		assert.Zero(t, in.Watch.Reanchors, in.Watch.LastReanchor)
		assert.InDelta(t, 1e9, float64(in.Rate), 1, "the refined rate: %+v", in)
		r0, c0 := ref(), c.Now()
		bubbleSleep(time.Minute)
		assert.InDelta(t, float64(ref()-r0), float64(c.Now()-c0), float64(time.Microsecond), "a minute of the reference")
	})
}

// TestBubbleSource: a Clock on Bubble follows the bubble's fake time
// exactly, Since and Time alike: Time(Now()) is the bubble's time.Now,
// and a reading's Time stays what it was. Outside a bubble it follows
// the real time.
func TestBubbleSource(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, err := schedclock.New(schedclock.Bubble())
		require.NoError(t, err)
		defer c.Close()
		assert.Equal(t, "bubble (time.Now)", c.Info().Source)
		r0 := c.Now()
		t0 := c.WallTime(r0)
		assert.True(t, time.Now().Equal(t0), "Time(Now()) %v, the bubble's time.Now %v", t0, time.Now())
		bubbleSleep(30 * time.Minute)
		assert.Equal(t, 30*time.Minute, c.Since(r0))
		assert.True(t, time.Now().Equal(c.WallTime(c.Now())), "after 30 min")
		assert.Equal(t, t0, c.WallTime(r0), "Time(r0) after 30 min of bubble sleep")
	})
	c, err := schedclock.New(schedclock.Bubble())
	require.NoError(t, err)
	defer c.Close()
	// Outside a bubble it reads time.Now: its advance lies within the
	// brackets of the monotonic clock's, however loaded the machine is.
	outer := time.Now()
	start := c.Now()
	inner := time.Now()
	innerEnd := time.Now()
	for !innerEnd.After(inner) {
		innerEnd = time.Now()
	}
	end := c.Now()
	outerEnd := time.Now()
	moved := time.Duration(end - start)
	assert.GreaterOrEqual(t, moved, innerEnd.Sub(inner), "outside a bubble: slower than real time")
	assert.LessOrEqual(t, moved, outerEnd.Sub(outer), "outside a bubble: faster than real time")
}
