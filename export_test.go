package schedclock

// export_test.go exports to the external tests (package schedclock_test)
// the few internals they must reach: a counter they drive by hand and the
// writer's step hook.

import (
	"sync/atomic"
)

// FakeCounter is a manually driven counter for tests: it reads what it was
// set to, masked to its width, and can be moved forwards or backwards.
type FakeCounter struct {
	value atomic.Uint64
	reads atomic.Uint64
}

func (f *FakeCounter) Read() uint64 {
	f.reads.Add(1)
	return f.value.Load()
}

func (f *FakeCounter) Set(v uint64)      { f.value.Store(v) }
func (f *FakeCounter) Add(d uint64)      { f.value.Add(d) }
func (f *FakeCounter) Reads() uint64     { return f.reads.Load() }
func (f *FakeCounter) Value() uint64     { return f.value.Load() }
func (f *FakeCounter) StepBack(d uint64) { f.value.Add(-d) }

// Source returns the counter as a Source of the given width and rate.
func (f *FakeCounter) Source(name string, bits int, rate uint64) Source {
	return Source{Name: name, Read: f.Read, Bits: bits, Rate: rate}
}

// SetStep installs a hook that the writer calls between its steps.
func SetStep(c *Clock, step func(string)) {
	c.st.mu.Lock()
	defer c.unlock()
	if step == nil {
		step = noStep
	}
	c.st.writer.step = step
}

// CoarseFollowsTheKernel says whether c's Coarse checks the kernel's vDSO
// time data.
func (c *Clock) CoarseFollowsTheKernel() bool { return c.coarse.tick.Load() != nil }

// WallPairedAfter says whether the background goroutine has paired c's
// wall map (a full pairing, not a first use's provisional one) at a
// reading after ns.
func (c *Clock) WallPairedAfter(ns int64) bool {
	c.st.mu.Lock()
	defer c.unlock()
	return c.st.wall.lastPair[0] > ns
}

// The internals the external tests name that are not the package's API:
// the per-architecture counters (Hardware returns this machine's) and the
// errors that report a caller's mistake.
var (
	TSC           = tscSource
	CNTVCT        = func() (Source, error) { src, _, _, err := probeCNTVCT(); return src, err }
	RDTIME        = func() (Source, error) { return withMeasuredRate(probeRDTIME()) }
	TimeBase      = func() (Source, error) { return withMeasuredRate(probeTimeBase()) }
	StableCounter = func() (Source, error) { return withMeasuredRate(probeStableCounter()) }
	TOD           = func() (Source, error) { return withMeasuredRate(probeTOD()) }

	ErrUntrusted     = errUntrusted
	ErrInvalidOption = errInvalidOption
	ErrDefaultClock  = errDefaultClock
	ErrReentered     = errReentered
)

// WatchPeriod is the watch's shortest period.
const WatchPeriod = watchPeriod

// BubbleGoroutines counts the goroutines of the caller's testing/synctest
// bubble whose stack runs through fn ("" for all of them).
var BubbleGoroutines = bubbleGoroutines
