package schedclock_test

import (
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/schedclocktest"
)

// User code that calls runtime.Goexit: t.Fatal, t.FailNow and testify's
// require do, so a test's fake Source or reference does it for real. The
// goroutine it runs on exits whatever the clock does; the clock must
// stay consistent, record the exit as a fault, and, where the goroutine
// is its own, go on with the work in another.

// onBackground reports whether the calling goroutine is a Clock's
// background goroutine.
func onBackground() bool {
	buf := make([]byte, 64<<10)
	return strings.Contains(string(buf[:runtime.Stack(buf, false)]), "schedclock.(*Clock).tick(")
}

// sixteenBits is a 16-bit, 65536 Hz counter that follows the runtime's
// monotonic clock: it wraps every second, so a clock on it that is not
// folded for a second loses time and steps back.
func sixteenBits(read func()) schedclock.Source {
	start := time.Now()
	return schedclock.Source{Name: "16 bits", Bits: 16, Rate: 65536, Read: func() uint64 {
		read()
		return uint64(time.Since(start) * 65536 / time.Second)
	}}
}

// goexitOnce returns a function that calls runtime.Goexit the first time
// it is called on a background goroutine once armed is set, and reports
// in fired that it did.
func goexitOnce(armed, fired *atomic.Bool) func() {
	return func() {
		if armed.Load() && !fired.Load() && onBackground() && fired.CompareAndSwap(false, true) {
			runtime.Goexit()
		}
	}
}

// clockGoroutines counts the goroutines that run a Clock's background
// loop: what a Goexit could take away, counted exactly (the process's
// goroutine count moves with other tests' goroutines still exiting,
// which under qemu takes a while).
func clockGoroutines() int {
	buf := make([]byte, 1<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "schedclock.runBackground(")
}

// keepsTime reads c for d: it never steps back, and it moves with real
// time to within an eighth of the counter's wrap (what a lost fold would
// cost, at least).
func keepsTime(t *testing.T, c *schedclock.Clock, d time.Duration) {
	t.Helper()
	start, realStart := c.Now(), time.Now()
	last := start
	for time.Since(realStart) < d {
		now := c.Now()
		require.GreaterOrEqual(t, now, last, "Now stepped back after %v", time.Since(realStart))
		last = now
		time.Sleep(100 * time.Microsecond)
	}
	moved, real := time.Duration(c.Now()-start), time.Since(realStart)
	assert.InDelta(t, float64(real), float64(moved), float64(time.Second/8), "the clock moved %v in %v of real time", moved, real)
}

func TestGoexitInTheBackground(t *testing.T) {
	for _, where := range []string{"Read", "reference"} {
		t.Run(where, func(t *testing.T) {
			var armed, fired atomic.Bool
			exit := goexitOnce(&armed, &fired)
			src := sixteenBits(func() {})
			var opts []schedclock.Option
			if where == "Read" {
				src = sixteenBits(exit)
			} else {
				opts = append(opts, schedclock.WithReference(func() int64 { exit(); return int64(time.Since(time.Time{})) }))
			}
			before := clockGoroutines()
			for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); before = clockGoroutines() {
				time.Sleep(20 * time.Millisecond) // until other tests' clocks have gone
				if clockGoroutines() == before {
					break
				}
			}
			c, err := schedclock.New(src, opts...)
			require.NoError(t, err)
			// Closed only at the end: Close waits for the background
			// goroutine, which must not hang a test that found it gone.
			running := before + 1
			require.Eventually(t, func() bool { return clockGoroutines() == running }, 2*time.Second, 10*time.Millisecond,
				"the clock's goroutine (%d before New, other tests' may still be exiting)", before)
			armed.Store(true)
			keepsTime(t, c, 3*time.Second)
			require.True(t, fired.Load(), "the %s never exited the background goroutine", where)
			in := c.Info()
			assert.GreaterOrEqual(t, in.Faults, 1)
			assert.Contains(t, in.LastFault, "Goexit")
			assert.Equal(t, running, clockGoroutines(), "the clock's goroutines after the exit")
			require.NoError(t, c.Close())
			assert.Eventually(t, func() bool { return clockGoroutines() == before }, 2*time.Second, 10*time.Millisecond,
				"the clock's goroutines after Close")
		})
	}
}

// exitsAfter is a 2 GHz Source whose Read exits its goroutine after
// reads reads.
func exitsAfter(reads int32) schedclock.Source {
	next := mustManual(2e9, 64)
	var left atomic.Int32
	left.Store(reads)
	return schedclock.Source{Name: "next", Bits: 64, Rate: 2e9, Read: func() uint64 {
		if left.Add(-1) < 0 {
			runtime.Goexit()
		}
		return next.Read()
	}}
}

// TestGoexitOnTheWriterPaths: a Read that exits the caller's goroutine
// in Register, Update, Suspend or Resume leaves the clock as it was (or
// as the call left it whole), the writer lock free, and the exit counted.
func TestGoexitOnTheWriterPaths(t *testing.T) {
	// inGoroutine runs f on a goroutine of its own, which the Read exits.
	inGoroutine := func(f func()) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			f()
		}()
		<-done
	}
	type path struct {
		name string
		// call is the writer call; exit is armed for it.
		call func(c *schedclock.Clock, m *schedclocktest.Manual, exit *atomic.Int32)
	}
	for _, p := range []path{
		{"Update", func(c *schedclock.Clock, _ *schedclocktest.Manual, exit *atomic.Int32) {
			exit.Store(1)
			_ = c.Update()
		}},
		{"Suspend", func(c *schedclock.Clock, _ *schedclocktest.Manual, exit *atomic.Int32) {
			exit.Store(1)
			_ = c.Suspend()
		}},
		{"Resume", func(c *schedclock.Clock, _ *schedclocktest.Manual, exit *atomic.Int32) {
			require.NoError(t, c.Suspend())
			exit.Store(1)
			_ = c.Resume() // left suspended, as a panic leaves it
		}},
		{"Register, the new Read at once", func(c *schedclock.Clock, _ *schedclocktest.Manual, exit *atomic.Int32) {
			_ = c.Register(exitsAfter(0)) // its first read, which checks it
		}},
		{"Register, the new Read mid-switch", func(c *schedclock.Clock, _ *schedclocktest.Manual, exit *atomic.Int32) {
			_ = c.Register(exitsAfter(1)) // the check passes; the switch's read exits
		}},
		{"Register, the old Read mid-switch", func(c *schedclock.Clock, _ *schedclocktest.Manual, exit *atomic.Int32) {
			next := mustManual(2e9, 64)
			exit.Store(1)
			_ = c.Register(next.Source())
		}},
	} {
		t.Run(p.name, func(t *testing.T) {
			m := mustManual(1e9, 64)
			var exit atomic.Int32
			c, err := schedclock.New(schedclock.Source{Name: "manual, exits", Bits: 64, Rate: 1e9, Read: func() uint64 {
				if exit.Load() > 0 && exit.Add(-1) == 0 {
					runtime.Goexit()
				}
				return m.Read()
			}})
			require.NoError(t, err)
			defer c.Close()
			m.Advance(time.Second)
			before, info := c.Now(), c.Info()
			inGoroutine(func() { p.call(c, m, &exit) })
			exit.Store(0)
			after := c.Info()
			assert.Equal(t, info.Faults+1, after.Faults, "the exit is counted")
			assert.Contains(t, after.LastFault, "Goexit")
			assert.Equal(t, info.Source, after.Source, "the source")
			assert.Equal(t, p.name == "Resume", after.Suspended, "suspended")
			if after.Suspended {
				require.NoError(t, c.Resume())
			}
			// The clock goes on from where it was, the lock free.
			now := c.Now()
			assert.GreaterOrEqual(t, now, before)
			m.Advance(time.Second)
			require.NoError(t, c.Update())
			assert.Equal(t, now.Add(time.Second), c.Now(), "the clock follows its counter again")
		})
	}
}
