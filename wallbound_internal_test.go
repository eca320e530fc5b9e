package schedclock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/adjtimex"
	"github.com/schedclock/schedclock/internal/clockbound"
	"github.com/schedclock/schedclock/internal/measure"
	"github.com/schedclock/schedclock/internal/testenv"
	"github.com/schedclock/schedclock/internal/vmclock"
)

// The tests of the bounded reading run a wallBounder on a clock of a
// Manual counter, whose readings and wall time are exact, with
// synthetic sources: a simulated kernel's adjtimex, vmclock pages and
// ClockBound segments in Go memory (this machine has neither device),
// and kernel clocks at offsets from the clock's readings.

// fakeKernel is the kernel's NTP state as adjtimex shows it: maxerror as
// last set, plus 500 µs for each whole second since (second_overflow),
// STA_UNSYNC past 16 s.
type fakeKernel struct {
	mu       sync.Mutex
	now      func() int64
	maxErrUs int64
	estErrUs int64
	status   int32
	setAt    int64
	err      error
	// tick and freq are the kernel's slew of CLOCK_REALTIME.
	tick, freq int64
}

func (k *fakeKernel) set(maxErrUs, estErrUs int64, status int32) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.maxErrUs, k.estErrUs, k.status, k.setAt = maxErrUs, estErrUs, status, k.now()
}

func (k *fakeKernel) read() (adjtimex.Reading, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err != nil {
		return adjtimex.Reading{}, k.err
	}
	grown := k.maxErrUs + adjtimex.GrowthUsPerSec*((k.now()-k.setAt)/1e9)
	r := adjtimex.Reading{MaxErrorUs: min(grown, adjtimex.PhaseLimitUs), EstErrorUs: k.estErrUs, Status: k.status, Tick: k.tick, Freq: k.freq}
	if grown > adjtimex.PhaseLimitUs {
		r.Status |= adjtimex.StaUnsync
	}
	if r.Unsynchronised() != "" {
		r.State = adjtimex.TimeError
	}
	return r, nil
}

// wallRig is a wallBounder on a Manual clock with synthetic sources.
type wallRig struct {
	m       *manual
	c       *Clock
	b       *wallBounder
	kernel  fakeKernel
	vm      *vmclock.Page
	cb      *clockbound.Segment
	counter atomic.Uint64 // the "TSC" a vmclock page converts
	monoOff atomic.Int64  // CLOCK_MONOTONIC is the clock's reading plus it
	bootOff atomic.Int64  // CLOCK_BOOTTIME is CLOCK_MONOTONIC plus it
	realOff atomic.Int64  // CLOCK_REALTIME is the clock's wall time plus it
	stopped atomic.Bool   // PVCLOCK_GUEST_STOPPED
}

const rigStart = time.Hour // the clock's reading when a rig starts

func newWallRig(t testing.TB) *wallRig {
	m, err := newManual(1e9, 64)
	require.NoError(t, err)
	// A clock without its background goroutine (New's clock less start):
	// a tick of it, in real time, holds the writer lock, and a snapshot
	// that finds it held is taken again a millisecond later. Nothing to
	// close: there is no goroutine to stop.
	src := m.Source()
	c, err := newClock(src, rating{hz: float64(src.Rate), origin: rateDeclared}, nil)
	require.NoError(t, err)
	m.Advance(rigStart)
	r := &wallRig{m: m, c: c}
	r.kernel.now, r.kernel.tick = r.nowNs, adjtimex.NominalTick
	r.kernel.set(2000, 100, adjtimex.StaPLL)
	r.monoOff.Store(5e9)
	r.bootOff.Store(7e9)
	r.b = &wallBounder{c: c, src: &wallSources{
		openVM: func() (*vmclock.Page, error) {
			if r.vm == nil {
				return nil, fmt.Errorf("%w: none in this test", vmclock.ErrNoDevice)
			}
			return r.vm, nil
		},
		openCB: func() (*clockbound.Segment, error) {
			if r.cb == nil {
				return nil, fmt.Errorf("%w: none in this test", clockbound.ErrNoSegment)
			}
			return r.cb, nil
		},
		adjtimex: r.kernel.read,
		counter: func() (func() uint64, uint8, string) {
			return r.counter.Load, vmclock.CounterX86TSC, ""
		},
		realtime:  func() int64 { return wallNanos(c, r.nowNs()) + r.realOff.Load() },
		monotonic: func() (int64, bool) { return r.nowNs() + r.monoOff.Load(), true },
		boottime:  func() (int64, bool) { return r.nowNs() + r.monoOff.Load() + r.bootOff.Load(), true },
		pages:     func(bool) (stopped, invalid, ok bool) { return r.stopped.Load(), false, true },
	}}
	return r
}

func (r *wallRig) nowNs() int64 { return int64(r.c.Now()) }

// wall is the clock's wall time now, in Unix ns.
func (r *wallRig) wall() int64 { return wallNanos(r.c, r.nowNs()) }

// half is a reading's half-width, and checks the reading is centred on
// the clock's wall time (a fallback source's reading).
func (r *wallRig) half(t testing.TB, b WallBound) int64 {
	t.Helper()
	require.Equal(t, r.wall(), b.earliest/2+b.latest/2+(b.earliest%2+b.latest%2)/2, "not centred on WallTime: %v", b)
	return (b.latest - b.earliest) / 2
}

// TestWallBoundFollowsAdjtimex: the kernel's maxerror, one 500 µs step
// and 500.5 µs a second since the snapshot; a refresh a second on reads
// the kernel again (which has grown by its own steps); a set of new
// values shows at the next refresh.
func TestWallBoundFollowsAdjtimex(t *testing.T) {
	r := newWallRig(t)
	b := r.b.now()
	assert.Equal(t, "adjtimex", b.Source())
	assert.Equal(t, WallSynchronized, b.Status())
	assert.Empty(t, b.Reason())
	assert.Equal(t, int64(2_500_000), r.half(t, b))
	r.m.Advance(400 * time.Millisecond)
	assert.InDelta(t, 2_500_000+200_200, r.half(t, r.b.now()), 1, "0.4 s of growth at 500.5 ppm")
	r.m.Advance(600 * time.Millisecond)
	// A second on: refreshed; the kernel's maxerror has grown one step.
	assert.Equal(t, int64(3_000_000), r.half(t, r.b.now()))
	r.m.Advance(2500 * time.Millisecond)
	assert.Equal(t, int64(4_000_000), r.half(t, r.b.now()), "the kernel's 3.5 ms after 3 s, read at 3.5 s")
	r.kernel.set(800, 50, adjtimex.StaPLL)
	r.m.Advance(100 * time.Millisecond)
	assert.InDelta(t, 4_000_000+50_050, r.half(t, r.b.now()), 1, "not refreshed yet: the old bound, grown")
	r.m.Advance(time.Second)
	assert.Equal(t, int64(1_800_000), r.half(t, r.b.now()), "set again 1.1 s ago: 0.8 ms, the kernel's step since, and ours")
}

// TestWallBoundUnsynchronisedKernel: STA_UNSYNC is status unknown, with
// the kernel's maxerror (16 s) as the stated bound; so is maxerror grown
// past 16 s, as the kernel then sets STA_UNSYNC; and After and Before
// say nothing definite.
func TestWallBoundUnsynchronisedKernel(t *testing.T) {
	r := newWallRig(t)
	r.kernel.set(adjtimex.PhaseLimitUs, adjtimex.PhaseLimitUs, adjtimex.StaUnsync)
	b := r.b.now()
	assert.Equal(t, WallUnknown, b.Status())
	assert.Contains(t, b.Reason(), "STA_UNSYNC")
	assert.GreaterOrEqual(t, r.half(t, b), int64(16e9))
	assert.False(t, b.After(time.Unix(0, 0)), "nothing is definite without a bound")
	assert.False(t, b.Before(time.Unix(1<<40, 0)))

	r = newWallRig(t)
	r.kernel.set(adjtimex.PhaseLimitUs-600, 100, adjtimex.StaPLL)
	assert.Equal(t, WallSynchronized, r.b.now().Status())
	r.m.Advance(900 * time.Millisecond)
	assert.Equal(t, WallSynchronized, r.b.now().Status())
	r.m.Advance(1200 * time.Millisecond) // the kernel has grown past 16 s
	b = r.b.now()
	assert.Equal(t, WallUnknown, b.Status())
	assert.Contains(t, b.Reason(), "STA_UNSYNC")
}

// TestWallBoundVoidsItselfWhenNotRefreshed: a snapshot whose refresh is
// held up (another reader refreshing) still says, from its own numbers,
// when the kernel's maxerror passes 16 s: unknown from then on.
func TestWallBoundVoidsItselfWhenNotRefreshed(t *testing.T) {
	r := newWallRig(t)
	r.kernel.set(adjtimex.PhaseLimitUs-1000, 100, adjtimex.StaPLL)
	require.Equal(t, WallSynchronized, r.b.now().Status())
	r.b.refreshing.Store(true) // a refresher that never finishes
	defer r.b.refreshing.Store(false)
	r.m.Advance(1900 * time.Millisecond)
	b := r.b.now()
	assert.Equal(t, WallSynchronized, b.Status(), "1.9 s of 2 s")
	assert.InDelta(t, 16e9+500_000-1e6+growthAt(1.9e9), r.half(t, b), 1)
	r.m.Advance(200 * time.Millisecond)
	b = r.b.now()
	assert.Equal(t, WallUnknown, b.Status())
	assert.Contains(t, b.Reason(), "past 16 s")
}

// growthAt is the adjtimex bound's growth over ns.
func growthAt(ns int64) float64 {
	return float64(adjtimex.GrowthNs(ns, adjtimex.RatePPB(wallPaceMarginPPM)))
}

// TestWallBoundIncludesTheMapsError: the wall map's own error (here the
// clock's wall time against a CLOCK_REALTIME 3 µs ahead) widens the
// bound, so that CLOCK_REALTIME stays inside it.
func TestWallBoundIncludesTheMapsError(t *testing.T) {
	r := newWallRig(t)
	r.realOff.Store(3000)
	b := r.b.now()
	assert.Equal(t, int64(2_503_000), r.half(t, b))
	rt := r.b.src.realtime()
	assert.True(t, b.earliest <= rt && rt <= b.latest)
}

// TestWallBoundSuspendIsADisruption: CLOCK_BOOTTIME − CLOCK_MONOTONIC
// growing (a suspend) changes the generation at the next refresh, has
// the clock's maps pair again, and leaves the kernel's estimate unknown
// until the daemon has set it again; the pvclock page's guest-stopped
// flag does the same.
func TestWallBoundSuspendIsADisruption(t *testing.T) {
	r := newWallRig(t)
	b := r.b.now()
	gen := b.Generation()
	require.Equal(t, WallSynchronized, b.Status())
	r.bootOff.Add(30e9) // 30 s asleep
	r.m.Advance(time.Second)
	b = r.b.now()
	assert.Equal(t, gen+1, b.Generation())
	assert.Equal(t, WallUnknown, b.Status())
	assert.Contains(t, b.Reason(), "suspended")
	r.m.Advance(time.Second)
	assert.Equal(t, WallUnknown, r.b.now().Status(), "the kernel's estimate only grew since")
	r.kernel.set(900, 60, adjtimex.StaPLL)
	r.m.Advance(time.Second)
	b = r.b.now()
	assert.Equal(t, WallSynchronized, b.Status(), "set again after the disruption")
	assert.Equal(t, gen+1, b.Generation())

	r.stopped.Store(true)
	r.m.Advance(time.Second)
	b = r.b.now()
	assert.Equal(t, gen+2, b.Generation())
	assert.Contains(t, b.Reason(), "PVCLOCK_GUEST_STOPPED")
	r.stopped.Store(false) // the guest's watchdog clears it: no disruption
	r.m.Advance(time.Second)
	assert.Equal(t, gen+2, r.b.now().Generation())
}

// TestWallBoundWithoutSources: no adjtimex (not Linux) is source none,
// status unknown, the widest interval time.Unix can say.
func TestWallBoundWithoutSources(t *testing.T) {
	r := newWallRig(t)
	r.kernel.err = fmt.Errorf("%w on plan9", adjtimex.ErrUnsupported)
	b := r.b.now()
	assert.Equal(t, "none", b.Source())
	assert.Equal(t, WallUnknown, b.Status())
	assert.Equal(t, time.Unix(0, math.MinInt64), b.Earliest())
	assert.Equal(t, time.Unix(0, math.MaxInt64), b.Latest())
	var zero WallBound
	assert.Equal(t, WallUnknown, zero.Status())
	assert.Empty(t, zero.Source())
	assert.Zero(t, zero.Generation())
	assert.False(t, zero.After(time.Time{}))
}

// vmPage is a synchronized TSC clock whose k-th version differs in every
// field: the reference counter value, the time, the errors, and (every
// fourth and eighth version) the markers.
func vmPage(k uint64) vmclock.Snapshot {
	return vmclock.Snapshot{
		Magic: vmclock.Magic, Size: vmclock.Size, Version: vmclock.Version, CounterID: vmclock.CounterX86TSC,
		TimeType: vmclock.TimeUTC, ClockStatus: vmclock.StatusSynchronized,
		Flags:            vmclock.FlagPeriodMaxErrValid | vmclock.FlagTimeMaxErrValid | vmclock.FlagVMGenCounter,
		DisruptionMarker: 100 + k/4, VMGeneration: k / 8,
		PeriodShift: 29, Period: 0x89705F4136B4A597, PeriodMaxError: 0x89705F4136B4A597 / 1_000_000,
		CounterValue: 1_000_000 + k, TimeSec: 1_798_761_600 + k, TimeMaxErrorNs: 10_000 + k,
	}
}

func newVMPage(k uint64) *vmclock.Page {
	p := new(vmclock.Page)
	p.Write(vmPage(k))
	return p
}

// TestWallBoundFromVMClock: a page that gives the time for this CPU's
// counter is the reading: its time at the counter, its bound; free
// running says so; a page that stops giving the time (unreliable) hands
// the reading to the fallback.
func TestWallBoundFromVMClock(t *testing.T) {
	r := newWallRig(t)
	r.vm = newVMPage(0)
	r.counter.Store(1_000_000 + 2e9) // 2 s after the reference
	b := r.b.now()
	want, err := vmPage(0).TimeAt(r.counter.Load(), vmclock.CounterX86TSC)
	require.NoError(t, err)
	assert.Equal(t, "vmclock", b.Source())
	assert.Equal(t, WallSynchronized, b.Status())
	assert.Equal(t, want.UnixNano-int64(want.MaxErrorNs), b.earliest)
	assert.Equal(t, want.UnixNano+int64(want.MaxErrorNs), b.latest)
	assert.InDelta(t, int64(1_798_761_602e9), want.UnixNano, 1, "2e9 counts of the page's 1 ns (rounded down to 2^-93 s)")

	free := vmPage(0)
	free.ClockStatus = vmclock.StatusFreeRunning
	r.vm.Write(free)
	b = r.b.now()
	assert.Equal(t, WallFreeRunning, b.Status())
	assert.Contains(t, b.Reason(), "free running")

	broken := vmPage(0)
	broken.ClockStatus = vmclock.StatusUnreliable
	r.vm.Write(broken)
	b = r.b.now()
	assert.Equal(t, "adjtimex", b.Source())
	assert.Equal(t, int64(2_500_000), r.half(t, b))
}

// TestWallBoundVMClockLayoutDefects: every defect of the live page
// (magic, version, size, status, counter, time type, validity flags,
// garbage, a writer that never finishes) takes the reading away from
// vmclock: the fallback's bound, never the defective page's.
func TestWallBoundVMClockLayoutDefects(t *testing.T) {
	for name, edit := range map[string]func(s *vmclock.Snapshot){
		"magic":               func(s *vmclock.Snapshot) { s.Magic ^= 1 },
		"version":             func(s *vmclock.Snapshot) { s.Version = 2 },
		"size":                func(s *vmclock.Snapshot) { s.Size = vmclock.MinSize - 1 },
		"status unknown":      func(s *vmclock.Snapshot) { s.ClockStatus = vmclock.StatusUnknown },
		"status initializing": func(s *vmclock.Snapshot) { s.ClockStatus = vmclock.StatusInitializing },
		"another counter":     func(s *vmclock.Snapshot) { s.CounterID = vmclock.CounterARMVCNT },
		"monotonic time":      func(s *vmclock.Snapshot) { s.TimeType = vmclock.TimeMonotonic },
		"no maxerror":         func(s *vmclock.Snapshot) { s.Flags &^= vmclock.FlagTimeMaxErrValid },
		"zero period":         func(s *vmclock.Snapshot) { s.Period = 0 },
		"garbage": func(s *vmclock.Snapshot) {
			*s = vmclock.Snapshot{Magic: 0xa5a5a5a5, Size: 0xa5a5a5a5, Version: 0xa5a5, TimeSec: 0xa5a5a5a5a5a5a5a5}
		},
	} {
		r := newWallRig(t)
		r.vm = newVMPage(0)
		r.counter.Store(1_000_000)
		require.Equal(t, "vmclock", r.b.now().Source(), name)
		s := vmPage(0)
		edit(&s)
		r.vm.Write(s)
		b := r.b.now()
		assert.Equal(t, "adjtimex", b.Source(), name)
		assert.Equal(t, int64(2_500_000), r.half(t, b), name)
	}
	r := newWallRig(t)
	r.vm = newVMPage(0)
	require.Equal(t, "vmclock", r.b.now().Source())
	r.vm.SetSeq(9) // a writer stopped half-way
	b := r.b.now()
	assert.Equal(t, "adjtimex", b.Source())
	assert.Equal(t, WallUnknown, b.Status(), "the markers cannot be read: a disruption cannot be ruled out")
	assert.Contains(t, b.Reason(), "being written")
}

// TestWallBoundGenerationFollowsVMClockMarkers: a writer goroutine
// rewrites the page as fast as it can, the markers changing every fourth
// version; readers read meanwhile. Every reading is one whole version's
// time and bound at the counter (or, while the page could not be read,
// the fallback, unknown), never a mix; a reading whose call saw one
// marker has a generation other than the last reading that saw another
// (the generation changes within one read of a marker change); and a
// reader's generations never go back.
func TestWallBoundGenerationFollowsVMClockMarkers(t *testing.T) {
	r := newWallRig(t)
	r.vm = newVMPage(0)
	const counter = 1_000_000 + 5e9
	r.counter.Store(counter)
	versions := map[int64]vmclock.Reading{}
	for k := range uint64(20_001) {
		want, err := vmPage(k).TimeAt(counter, vmclock.CounterX86TSC)
		require.NoError(t, err)
		versions[want.UnixNano-int64(want.MaxErrorNs)] = want
	}
	r.b.now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var begun, written atomic.Uint64 // versions whose write began, and ended
	var changes, reads atomic.Int64
	readers := max(runtime.GOMAXPROCS(0)-1, 1)
	wg.Go(func() {
		for k := uint64(1); k <= 20_000; k++ {
			select {
			case <-stop:
				return
			default:
			}
			begun.Store(k)
			r.vm.Write(vmPage(k))
			written.Store(k)
			for range 8 {
				runtime.Gosched() // the readers' turn, on a machine of few CPUs
			}
			// Every 16th version waits for two readings per reader after
			// it (or for the readers' end), so that a reading sees the
			// markers change however the scheduler, or the race detector,
			// paces the goroutines: the markers change every 4 versions.
			if k%16 == 0 {
				for want := reads.Load() + 2*int64(readers); reads.Load() < want; {
					select {
					case <-stop:
						return
					default:
					}
					runtime.Gosched()
				}
			}
		}
	})
	var rg sync.WaitGroup
	for range readers {
		rg.Go(func() {
			var lastMarker, lastGen uint64
			haveLast := false
			for n := 0; n < 20_000 && written.Load() < 20_000; n++ {
				runtime.Gosched()
				b1, w1 := begun.Load(), written.Load()
				m1, g1, err1 := r.vm.Markers()
				b := r.b.now()
				m2, g2, err2 := r.vm.Markers()
				w2, b2 := written.Load(), begun.Load()
				reads.Add(1)
				if b.Source() == "vmclock" {
					want, ok := versions[b.earliest]
					if !assert.True(t, ok, "a reading no version gives: %v", b) {
						return
					}
					assert.Equal(t, want.UnixNano+int64(want.MaxErrorNs), b.latest, "a torn reading")
				} else {
					assert.Equal(t, WallUnknown, b.Status(), "the fallback while the page is being written: %v", b)
				}
				assert.GreaterOrEqual(t, b.Generation(), lastGen, "the generation went back")
				if err1 != nil || err2 != nil || m1 != m2 || g1 != g2 || b1 != w1 || w1 != w2 || w2 != b2 {
					continue // the page was written during the call (its markers may not have moved)
				}
				if haveLast && m1 != lastMarker {
					changes.Add(1)
					assert.NotEqual(t, lastGen, b.Generation(), "the marker changed from %d to %d, the generation stayed %d", lastMarker, m1, lastGen)
				}
				lastMarker, lastGen, haveLast = m1, b.Generation(), true
			}
		})
	}
	rg.Wait()
	close(stop)
	wg.Wait()
	t.Logf("%d readings over %d versions, %d marker changes seen between readings", reads.Load(), written.Load(), changes.Load())
	require.Positive(t, changes.Load(), "no reader saw a marker change")
}

// cbSegment is a synchronized daemon's k-th update as of the monotonic
// instant asOf: every field a function of k.
func cbSegment(k uint64, asOf int64, marker uint64) clockbound.Snapshot {
	return clockbound.Snapshot{
		Magic: clockbound.Magic, SegSize: clockbound.Size, Version: clockbound.Version,
		AsOf: asOf, VoidAfter: asOf + 10e9, BoundNs: 20_000 + int64(k), DisruptionMarker: marker,
		MaxDriftPPB: 15_000, Status: clockbound.StatusSynchronized,
	}
}

// TestWallBoundFromClockBound: the daemon's bound at as_of plus its
// drift (stretched by the pace margin) since, as of CLOCK_MONOTONIC read
// after the clock; free running after the 5 s grace; past void_after
// the fallback.
func TestWallBoundFromClockBound(t *testing.T) {
	r := newWallRig(t)
	r.cb = new(clockbound.Segment)
	mono := r.nowNs() + r.monoOff.Load()
	r.cb.Write(cbSegment(0, mono-1e9, 0)) // a second old
	b := r.b.now()
	assert.Equal(t, "clockbound", b.Source())
	assert.Equal(t, WallSynchronized, b.Status())
	assert.Equal(t, int64(20_000+15_000), r.half(t, b))
	r.m.Advance(500 * time.Millisecond)
	assert.InDelta(t, 20_000+15_000+7_508, r.half(t, r.b.now()), 1, "half a second at 15 ppm and its margin")
	r.m.Advance(4 * time.Second) // 5.5 s after as_of: no update since
	b = r.b.now()
	assert.Equal(t, WallFreeRunning, b.Status())
	assert.Contains(t, b.Reason(), "5 s")
	r.m.Advance(5 * time.Second) // past void_after
	b = r.b.now()
	assert.Equal(t, "adjtimex", b.Source())
	assert.Equal(t, WallSynchronized, b.Status())
	info := r.b.describe()
	assert.Contains(t, info, "; clockbound: bound past void_after")

	// The daemon updates again: back to ClockBound at the next look (its
	// generation moved).
	r.cb.Write(cbSegment(1, r.nowNs()+r.monoOff.Load(), 0))
	b = r.b.now()
	assert.Equal(t, "clockbound", b.Source(), "%v", b)
}

// TestWallBoundClockBoundDefects: each defect of the live segment (a
// magic, a version, a wiped segment, values no daemon writes, a status
// unknown or disrupted, a marker behind vmclock's) hands the reading to
// the fallback, never the defective bound.
func TestWallBoundClockBoundDefects(t *testing.T) {
	for name, edit := range map[string]func(g *clockbound.Segment, s clockbound.Snapshot){
		"magic":          func(g *clockbound.Segment, s clockbound.Snapshot) { s.Magic[1] = 0; g.Write(s) },
		"protocol 1":     func(g *clockbound.Segment, s clockbound.Snapshot) { s.Version = 1; g.Write(s) },
		"wiped":          func(g *clockbound.Segment, s clockbound.Snapshot) { g.SetVersionGeneration(0, 0) },
		"negative bound": func(g *clockbound.Segment, s clockbound.Snapshot) { s.BoundNs = -1; g.Write(s) },
		"drift 100%":     func(g *clockbound.Segment, s clockbound.Snapshot) { s.MaxDriftPPB = 1e9; g.Write(s) },
		"status unknown": func(g *clockbound.Segment, s clockbound.Snapshot) {
			s.Status = clockbound.StatusUnknown
			g.Write(s)
		},
		"status disrupted": func(g *clockbound.Segment, s clockbound.Snapshot) {
			s.Status = clockbound.StatusDisrupted
			g.Write(s)
		},
		"status undefined": func(g *clockbound.Segment, s clockbound.Snapshot) { s.Status = 9; g.Write(s) },
		"as_of ahead":      func(g *clockbound.Segment, s clockbound.Snapshot) { s.AsOf += 3e9; g.Write(s) },
		"void already":     func(g *clockbound.Segment, s clockbound.Snapshot) { s.VoidAfter = s.AsOf; g.Write(s) },
	} {
		r := newWallRig(t)
		r.cb = new(clockbound.Segment)
		s := cbSegment(0, r.nowNs()+r.monoOff.Load(), 0)
		r.cb.Write(s)
		require.Equal(t, "clockbound", r.b.now().Source(), name)
		edit(r.cb, s)
		r.m.Advance(time.Second)
		b := r.b.now()
		assert.Equal(t, "adjtimex", b.Source(), name)
	}
	r := newWallRig(t)
	r.vm = newVMPage(0)
	r.vm.Write(func() vmclock.Snapshot { s := vmPage(0); s.CounterID = vmclock.CounterInvalid; return s }())
	r.cb = new(clockbound.Segment)
	s := cbSegment(0, r.nowNs()+r.monoOff.Load(), 100)
	s.DisruptionSupport = true
	r.cb.Write(s)
	require.Equal(t, "clockbound", r.b.now().Source(), "the daemon's marker is vmclock's")
	s.DisruptionMarker = 99
	r.cb.Write(s)
	r.m.Advance(time.Second)
	b := r.b.now()
	assert.Equal(t, "adjtimex", b.Source())
	assert.Contains(t, r.b.describe(), "has not caught up with vmclock's disruption marker")
}

// TestWallBoundGenerationFollowsClockBoundsMarker: the daemon's writer
// hammers its seqlock with the marker changing every fourth update
// (and no vmclock page to compare it with): every reading is the bound
// of one whole update, and the generation changes within one read of a
// marker change.
func TestWallBoundGenerationFollowsClockBoundsMarker(t *testing.T) {
	r := newWallRig(t)
	r.cb = new(clockbound.Segment)
	asOf := r.nowNs() + r.monoOff.Load()
	r.cb.Write(cbSegment(0, asOf, 0))
	r.b.now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var begun, written atomic.Uint64 // versions whose write began, and ended
	var changes, reads atomic.Int64
	readers := max(runtime.GOMAXPROCS(0)-1, 1)
	wg.Go(func() {
		for k := uint64(1); k <= 20_000; k++ {
			select {
			case <-stop:
				return
			default:
			}
			begun.Store(k)
			r.cb.Write(cbSegment(k, asOf, k/4))
			written.Store(k)
			for range 8 {
				runtime.Gosched()
			}
			// Every 16th version waits for two readings per reader after
			// it (or for the readers' end), so that a reading sees the
			// markers change however the scheduler, or the race detector,
			// paces the goroutines: the markers change every 4 versions.
			if k%16 == 0 {
				for want := reads.Load() + 2*int64(readers); reads.Load() < want; {
					select {
					case <-stop:
						return
					default:
					}
					runtime.Gosched()
				}
			}
		}
	})
	var rg sync.WaitGroup
	for range readers {
		rg.Go(func() {
			var lastMarker, lastGen uint64
			haveLast := false
			for n := 0; n < 20_000 && written.Load() < 20_000; n++ {
				runtime.Gosched()
				b1, w1 := begun.Load(), written.Load()
				s1, err1 := r.cb.Read()
				b := r.b.now()
				s2, err2 := r.cb.Read()
				w2, b2 := written.Load(), begun.Load()
				reads.Add(1)
				half := (b.latest - b.earliest) / 2
				if b.Source() == "clockbound" {
					k := half - 20_000
					if !assert.True(t, k >= 0 && k <= 20_000, "a bound no update gives: %d", half) {
						return
					}
				}
				assert.GreaterOrEqual(t, b.Generation(), lastGen)
				if err1 != nil || err2 != nil || s1.DisruptionMarker != s2.DisruptionMarker || b1 != w1 || w1 != w2 || w2 != b2 {
					continue // the segment was written during the call
				}
				if haveLast && s1.DisruptionMarker != lastMarker {
					changes.Add(1)
					assert.NotEqual(t, lastGen, b.Generation(), "the marker changed from %d to %d", lastMarker, s1.DisruptionMarker)
				}
				lastMarker, lastGen, haveLast = s1.DisruptionMarker, b.Generation(), true
			}
		})
	}
	rg.Wait()
	close(stop)
	wg.Wait()
	require.Positive(t, changes.Load(), "no reader saw a marker change")
}

// TestAGenerationChangeHasTheMapsPairAgain: a map that has looked at
// the generation is due at once when it changes, whatever its schedule
// (a map asleep for an hour included), with its pace to be measured
// afresh (a migration may have changed the counter's rate); unchanged,
// it keeps its schedule.
func TestAGenerationChangeHasTheMapsPairAgain(t *testing.T) {
	now := time.Now()
	var r pairedMap
	r.due = now
	r.dueLocked(now) // it has looked
	r.due, r.lastPair, r.slow, r.paceNext, r.repace = now.Add(time.Hour), [2]int64{10, 20}, true, false, false
	r.asleep.Store(true)
	assert.False(t, r.dueLocked(now), "in step: not due for an hour")
	wallGeneration.Add(1)
	assert.True(t, r.dueLocked(now), "a disruption: due at once")
	assert.Equal(t, [2]int64{}, r.lastPair, "the pace is measured afresh")
	assert.True(t, r.paceNext && r.repace)
	assert.False(t, r.asleep.Load())
	r.due = now.Add(time.Hour)
	r.asleep.Store(true)
	assert.False(t, r.dueLocked(now), "the generation taken: on schedule again")
}

// TestWaitUntilPastSleepsOnTimers: WaitUntilPast returns once a reading
// is definitely after t, having slept (not spun) for what remained;
// ctx's end ends it; a reading without a bound is ErrNoWallBound.
func TestWaitUntilPastSleepsOnTimers(t *testing.T) {
	start := time.Now()
	var calls atomic.Int64
	now := func() WallBound {
		calls.Add(1)
		wall := time.Now().UnixNano()
		return WallBound{earliest: wall - 2e6, latest: wall + 2e6, about: &wallAbout{source: "test", status: WallSynchronized}}
	}
	target := start.Add(3 * time.Millisecond)
	require.NoError(t, waitUntilPast(context.Background(), target, now))
	assert.True(t, time.Since(start) >= 5*time.Millisecond, "returned before earliest passed the target")
	assert.LessOrEqual(t, calls.Load(), int64(4), "a spin, not a sleep")
	assert.True(t, now().After(target))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	err := waitUntilPast(ctx, time.Now().Add(time.Hour), now)
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	unknown := func() WallBound { return WallBound{about: &wallAbout{reason: "no source here", status: WallUnknown}} }
	//lint:ignore SA1012 WaitUntilPast's doc says a nil ctx never ends: that is what is tested
	err = waitUntilPast(nil, time.Now(), unknown)
	assert.ErrorIs(t, err, ErrNoWallBound)
	assert.True(t, strings.Contains(err.Error(), "no source here"))
	assert.False(t, errors.Is(err, context.Canceled))
}

// TestTheWallMapsErrorIsInTheBound: on the default clock, against the
// real CLOCK_REALTIME, with a ClockBound segment that says the wall
// clock is exact (bound 0, no drift), the bound is the wall map's own
// error alone; CLOCK_REALTIME read before and after each reading meets
// the reading's interval: 10,000 readings, 1,000,000 in the
// qualification layer.
func TestTheWallMapsErrorIsInTheBound(t *testing.T) {
	n := 10_000
	if testenv.Qualifying() {
		n = 1_000_000
	}
	mono := monotonicReader.quick()
	require.NotZero(t, mono)
	seg := new(clockbound.Segment)
	seg.Write(clockbound.Snapshot{
		Magic: clockbound.Magic, SegSize: clockbound.Size, Version: clockbound.Version,
		AsOf: mono, VoidAfter: mono + int64(time.Hour), Status: clockbound.StatusSynchronized,
	})
	src := realWallSources()
	src.openVM = func() (*vmclock.Page, error) { return nil, vmclock.ErrNoDevice }
	src.openCB = func() (*clockbound.Segment, error) { return seg, nil }
	b := &wallBounder{c: defaultClock, src: src}
	var widest, outside int64
	for range n {
		before := time.Now().UnixNano()
		w := b.now()
		after := time.Now().UnixNano()
		require.Equal(t, "clockbound", w.Source(), "%v", w)
		widest = max(widest, (w.latest-w.earliest)/2)
		if after < w.earliest || before > w.latest {
			outside++
			t.Errorf("CLOCK_REALTIME [%d, %d] outside %v", before, after, w)
			if outside > 5 {
				break
			}
		}
	}
	t.Logf("%d readings, the map's error at most ±%s; %s", n, measure.Ns(float64(widest)), defaultClock.Info().Source)
}

// TestWallBoundWhileTheClocksWriterHoldsItsLock: a snapshot taken while
// the clock's writer holds its lock (a switch may be under way, its
// freezer standing Now still) takes its readings' wall time from
// CLOCK_REALTIME, not from the clock, and is taken again a millisecond
// later; a line published since the snapshot (the latch's sequence
// moved) sends the next reading to CLOCK_REALTIME and a new snapshot.
func TestWallBoundWhileTheClocksWriterHoldsItsLock(t *testing.T) {
	r := newWallRig(t)
	r.realOff.Store(1e6) // CLOCK_REALTIME a millisecond ahead of the clock's wall time
	b := r.b.now()
	assert.Equal(t, r.wall(), (b.earliest+b.latest)/2, "the clock's wall time, the 1 ms in the bound")
	assert.Equal(t, int64(3_500_000), (b.latest-b.earliest)/2)

	r.c.st.mu.Lock()
	r.m.Advance(time.Second) // due
	b = r.b.now()
	assert.Equal(t, r.wall()+1e6, (b.earliest+b.latest)/2, "CLOCK_REALTIME's")
	r.m.Advance(500 * time.Microsecond)
	b = r.b.now()
	assert.Equal(t, r.wall()+1e6, (b.earliest+b.latest)/2, "still the lock: still CLOCK_REALTIME's")
	r.c.st.mu.Unlock()
	r.m.Advance(600 * time.Microsecond)
	b = r.b.now()
	assert.Equal(t, r.wall(), (b.earliest+b.latest)/2, "a millisecond on, the lock free: the clock's again")

	seq := r.c.latch.seq.Load()
	require.NoError(t, r.c.Update()) // a fold: a new line published
	require.NotEqual(t, seq, r.c.latch.seq.Load())
	b = r.b.now()
	assert.Equal(t, r.wall(), (b.earliest+b.latest)/2, "refreshed at once, with the lock free")
	assert.Equal(t, r.c.latch.seq.Load(), r.b.state.Load().latchSeq)
}

// TestWallBoundWidensWhileTheKernelsSlewChanges: a daemon that changes
// CLOCK_REALTIME's pace (chronyd steers with the tick, 100 ppm a step)
// moves the wall map off the wall clock faster than its pairings saw:
// the bound grows by the change seen since the last snapshot as well,
// the snapshot is taken every 100 ms while the pace swings, and the
// next that sees no change grows by half as much.
func TestWallBoundWidensWhileTheKernelsSlewChanges(t *testing.T) {
	r := newWallRig(t)
	r.b.now()
	r.kernel.mu.Lock()
	r.kernel.tick = adjtimex.NominalTick - 1
	r.kernel.mu.Unlock()
	r.m.Advance(time.Second)
	assert.Equal(t, int64(3_000_000), r.half(t, r.b.now()), "the kernel's maxerror grown a step, and ours")
	r.m.Advance(50 * time.Millisecond)
	assert.InDelta(t, 3_000_000+(500_500+100_000)/20, r.half(t, r.b.now()), 1, "500.5 ppm and the 100 ppm the pace moved")
	r.m.Advance(100 * time.Millisecond) // looked at again after 100 ms while it swings
	r.b.now()                           // a snapshot that sees no change
	r.m.Advance(50 * time.Millisecond)
	assert.InDelta(t, 3_000_000+(500_500+50_000)/20, r.half(t, r.b.now()), 1, "half the swing")
}
