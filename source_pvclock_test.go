package schedclock

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/kernel"
	"github.com/schedclock/schedclock/internal/pvclock"
	"github.com/schedclock/schedclock/internal/testenv"
)

// onPage reports whether s reads the page (a version checked), not its
// fallback.
func (s *paravirtSource) onPage() bool { return s.state.Load() < onFallback }

// paravirtHere reports whether this machine's kernel runs on a
// paravirtual clock Paravirt knows.
func paravirtHere() (paravirtKind, bool) {
	cs := kernel.Clocksource()
	for _, k := range paravirtKinds {
		if cs != "" && k.clocksource == cs {
			return k, true
		}
	}
	return paravirtKind{}, false
}

// TestParavirtHere: on a kernel running on a paravirtual clock (the
// development machine: kvm-clock), Paravirt gives that clock, named for
// it, its evidence intact; elsewhere it refuses with ErrUnsupported and
// says why.
func TestParavirtHere(t *testing.T) {
	src, err := Paravirt()
	kind, here := paravirtHere()
	if !here || !pvclock.Supported {
		require.Error(t, err)
		assert.ErrorIs(t, err, ErrUnsupported)
		t.Skipf("no paravirtual clock here (kernel clocksource %q): %v", kernel.Clocksource(), err)
	}
	require.NoError(t, err)
	assert.Equal(t, kind.name, src.Name)
	assert.Equal(t, 63, src.Bits, "the page's readings are 63 bits wide")
	assert.Equal(t, uint64(1_000_000_000), src.Rate)
	prev := src.Read()
	for range 10000 {
		v := src.Read()
		require.GreaterOrEqual(t, v, prev)
		prev = v
	}
	assert.Empty(t, pvclockEvidence())
	desc := pvclockDescription()
	assert.Contains(t, desc, "version")
	assert.Contains(t, desc, "stable")
	assert.True(t, pvclockVerdict().Keep(), pvclockVerdict().String())
	probed, origin, errPPM, err := probePvclock()
	require.NoError(t, err)
	assert.Equal(t, src.Name, probed.Name)
	assert.Equal(t, rateNanoseconds, origin)
	assert.Zero(t, errPPM)
	t.Logf("%s: %s", src.Name, desc)
}

// syntheticPvclock returns the parameters a synthetic page starts from.
// Where this process reads a real pvclock page (a kernel on kvm-clock,
// where the default clock may be on it through pvclockShared) they are
// that page's, so that a test sharing its page in the real one's place
// (sharePage) moves no reader of the default clock; elsewhere a 2 GHz
// TSC's scale (0.5 ns a count) stamped at the TSC now. Either way the
// page's time is a function of the TSC alone: a test on it needs an x86
// TSC and the assembly readers (pvclock.Supported), not a kernel on the
// paravirtual clock, nor a page mapped by one.
func syntheticPvclock() pvclock.Pvclock {
	if real, err := foundParavirt(); err == nil && real.pv != nil {
		for range 100 {
			if p, ok := real.pv.Snapshot(); ok && p.Stable() {
				return p
			}
		}
	}
	return pvclock.Pvclock{TSCTimestamp: pvclock.TSC(), SystemTime: 1 << 40, Mul: 1 << 31, Flags: pvclock.TSCStableBit}
}

// timelineOf is p's time at the TSC now: the reference a Source on a
// synthetic page is given in place of CLOCK_MONOTONIC_RAW, which on a
// kernel on the paravirtual clock is the page's time plus a constant.
func timelineOf(p pvclock.Pvclock) func() int64 {
	return func() int64 { return int64(p.Time(pvclock.TSC())) }
}

// syntheticPage returns a test-owned page holding first, and a
// paravirtPage of kvm-clock's kind on it. It skips where this build
// cannot read a pvclock page (no x86 TSC, no assembly readers): the
// only precondition of the tests on it.
func syntheticPage(t *testing.T, first pvclock.Pvclock) (*pvclock.Page, *paravirtPage) {
	if !pvclock.Supported {
		t.Skip("no pvclock page reader in this build (" + runtime.GOARCH + ", or purego)")
	}
	buf := make([]byte, 2*pvclock.PageSize)
	off := (pvclock.PageSize - uintptr(unsafe.Pointer(&buf[0]))%pvclock.PageSize) % pvclock.PageSize
	pg := (*pvclock.Page)(unsafe.Pointer(&buf[off]))
	t.Cleanup(func() { runtime.KeepAlive(buf) })
	pg.Publish(first)
	loc := pvclock.Location{Pvclock: uint64(uintptr(unsafe.Pointer(pg))), Mapping: "a test's page", Layout: "synthetic"}
	return pg, &paravirtPage{kind: paravirtKinds[0], loc: loc, pv: pg}
}

// sharePage makes page the process's shared pvclock state (what
// readPvclock and Clock.Now's inline read use) for the rest of t, with a
// Source on it against raw, and returns the Source. The state before is
// restored at t's cleanup: close the clocks on the page first (register
// their cleanup after calling sharePage).
func sharePage(t *testing.T, page *paravirtPage, raw func() int64) *paravirtSource {
	s, err := newParavirtSource(page, raw)
	require.NoError(t, err)
	// The default clock's Info reads the shared state under its lock
	// (pvclockStatus), from its background goroutine too: swap it there.
	defaultClock.st.mu.Lock()
	saved := pvclockShared
	pvclockShared.page, pvclockShared.src = page.pv, s
	defaultClock.st.mu.Unlock()
	t.Cleanup(func() {
		defaultClock.st.mu.Lock()
		pvclockShared = saved
		defaultClock.st.mu.Unlock()
	})
	return s
}

// alreadyShared is paravirtOn's share for a page sharePage shared.
func alreadyShared(*paravirtPage) error { return nil }

// paravirtForOrdering is Paravirt where the kernel runs on a
// paravirtual clock, else Paravirt on a synthetic page shared for the
// rest of t, where this build reads pvclock pages: the cross-CPU tests
// of the page read then run on any x86 machine. ok is false where
// neither can be had.
func paravirtForOrdering(t *testing.T) (src Source, ok bool) {
	if src, err := Paravirt(); err == nil {
		return src, true
	}
	if !pvclock.Supported {
		return Source{}, false
	}
	base := syntheticPvclock()
	_, page := syntheticPage(t, base)
	sharePage(t, page, timelineOf(base))
	src, err := paravirtOn(page, alreadyShared)
	require.NoError(t, err)
	t.Logf("no paravirtual clock here: the page readers run on a synthetic page")
	return src, true
}

// TestParavirtOnASyntheticPage: Paravirt's Source on a pvclock page is
// the page's nanoseconds, 63 bits wide (the vDSO clears the top bit of
// its readings, and so do the readers: a 64-bit Source would take the
// wrap of bit 63 for time), at 1 GHz, named for the page's clock, and a
// Clock on it follows the page.
func TestParavirtOnASyntheticPage(t *testing.T) {
	base := syntheticPvclock()
	_, page := syntheticPage(t, base)
	sharePage(t, page, timelineOf(base))
	src, err := paravirtOn(page, alreadyShared)
	require.NoError(t, err)
	assert.Equal(t, "kvm-clock (pvclock, stable)", src.Name)
	assert.Equal(t, 63, src.Bits, "the page's readings are 63 bits wide")
	assert.Equal(t, uint64(1_000_000_000), src.Rate)
	c, err := New(src)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	// One offset of the clock from the page's timeline lies in every
	// reading's bracket (to within 1 ns of rounding): the clock is the
	// page's nanoseconds, shifted.
	ref := timelineOf(base)
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	prev := c.nanos()
	for range 10000 {
		r0 := ref()
		n := c.nanos()
		r1 := ref()
		require.GreaterOrEqual(t, n, prev)
		lo, hi = max(lo, n-r1), min(hi, n-r0)
		prev = n
	}
	assert.LessOrEqual(t, lo, hi+1, "no offset lies in every bracket: the clock does not follow the page")
}

// TestParavirtFallsBackWhenTheStableBitClears: readers on every P read a
// Source on a copy of the real page while the stable bit clears; each
// reading must be at least the largest any reader published before it
// began (a step back across goroutines shows), the page's evidence must
// say why it went, and a new Source on that page is refused.
func TestParavirtFallsBackWhenTheStableBitClears(t *testing.T) {
	base := syntheticPvclock()
	pg, page := syntheticPage(t, base)
	s, err := newParavirtSource(page, timelineOf(base))
	require.NoError(t, err)

	var maxSeen atomic.Uint64
	var stop atomic.Bool
	var reads atomic.Int64
	var wg sync.WaitGroup
	for range max(2, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				before := maxSeen.Load()
				v := s.read()
				if v < before {
					t.Errorf("a reading %d ns below one published before it began", before-v)
					return
				}
				for m := maxSeen.Load(); v > m && !maxSeen.CompareAndSwap(m, v); m = maxSeen.Load() {
				}
				reads.Add(1)
				runtime.Gosched()
			}
		}()
	}
	waitReads := func(n int64) {
		for target := reads.Load() + n; reads.Load() < target && !t.Failed(); {
			runtime.Gosched()
		}
	}
	waitReads(1000)
	p := pg.Load()
	p.Flags &^= pvclock.TSCStableBit
	pg.Publish(p)
	waitReads(1000)
	stop.Store(true)
	wg.Wait()

	assert.True(t, !s.onPage())
	why, _ := page.state()
	assert.Contains(t, why, "PVCLOCK_TSC_STABLE_BIT is clear")
	_, err = newParavirtSource(page, timelineOf(base))
	assert.ErrorIs(t, err, errUntrusted)
}

// TestParavirtReturnsToThePageWithoutSteppingBack: a Source that fell
// back returns to the page once the page is consistent again, and never
// hands out less than it did on the fallback. Here the reference runs
// 30 µs ahead once the offset is measured (within the tolerance of a
// consistent page), so the fallback runs 30 µs ahead of the page, and a
// return without its floor would step back by 30 µs.
func TestParavirtReturnsToThePageWithoutSteppingBack(t *testing.T) {
	base := syntheticPvclock()
	pg, page := syntheticPage(t, base)
	var ahead atomic.Int64
	ref := timelineOf(base)
	s, err := newParavirtSource(page, func() int64 { return ref() + ahead.Load() })
	require.NoError(t, err)
	ahead.Store(int64(30 * time.Microsecond))

	stable := pg.Load()
	unstable := stable
	unstable.Flags &^= pvclock.TSCStableBit
	pg.Publish(unstable)
	fallback := s.read()
	require.False(t, s.onPage())
	pg.Publish(stable)
	prev := fallback
	deadline := time.Now().Add(time.Second)
	for !s.onPage() && time.Now().Before(deadline) {
		v := s.read()
		require.GreaterOrEqual(t, v, prev, "a step back of %v", time.Duration(prev-v))
		prev = v
	}
	assert.True(t, s.onPage(), "not back on a consistent page after a second")
	for range 1000 {
		v := s.read()
		require.GreaterOrEqual(t, v, prev, "back on the page: a step back of %v", time.Duration(prev-v))
		prev = v
	}
}

// TestParavirtReturnsToThePageAfterATransient: an update held odd for
// 10 ms sends the Source to its fallback (after its bounded tries), and
// the Source is back on the page within a few reads of the update's end,
// its status naming the fall back, its reason and time, and the return.
func TestParavirtReturnsToThePageAfterATransient(t *testing.T) {
	base := syntheticPvclock()
	pg, page := syntheticPage(t, base)
	s, err := newParavirtSource(page, timelineOf(base))
	require.NoError(t, err)
	reading, history := s.status()
	assert.Empty(t, reading)
	assert.Empty(t, history)

	good := pg.Load()
	prev := s.read()
	pg.BeginUpdate()
	heldAt := time.Now()
	for time.Since(heldAt) < 10*time.Millisecond {
		v := s.read()
		require.GreaterOrEqual(t, v, prev)
		prev = v
	}
	assert.False(t, s.onPage(), "a page held odd for 10 ms read as on the page")
	reading, _ = s.status()
	assert.Contains(t, reading, "on "+rawClockName+" since ")
	assert.Contains(t, reading, "version kept changing")
	pg.Store(good)
	pg.EndUpdate()
	endedAt := time.Now()
	for !s.onPage() && time.Since(endedAt) < time.Second {
		v := s.read()
		require.GreaterOrEqual(t, v, prev)
		prev = v
	}
	assert.True(t, s.onPage(), "not back on the page a second after the update ended")
	reading, history = s.status()
	assert.Empty(t, reading)
	assert.Contains(t, history, "1 falls back to "+rawClockName+", the last at "+heldAt.Format("2006-01-02T15:04:05"))
	assert.Contains(t, history, "1 returns to the page, the last at ")
	t.Logf("back on the page %v after the update ended: %s", time.Since(endedAt), history)
}

// TestParavirtRefusals: the reasons Paravirt gives where it cannot run
// name what is missing.
func TestParavirtRefusals(t *testing.T) {
	if _, here := paravirtHere(); here && pvclock.Supported {
		t.Skip("this machine has a paravirtual clock: TestParavirtHere covers it (TestParavirtFollowsTheKernelsClocksource makes it play a kernel without one)")
	}
	_, err := Paravirt()
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrUnsupported) || errors.Is(err, errUntrusted), err.Error())
	assert.True(t, strings.Contains(err.Error(), "paravirt") || strings.Contains(err.Error(), "pvclock") || strings.Contains(err.Error(), "hyperv"), err.Error())
}

// TestParavirtFollowsTheKernelsClocksource: which page findParavirt
// looks for, and whether it offers one at all, is the kernel's word
// (current_clocksource), read here from a file bind-mounted over sysfs
// in a private mount namespace, so that this machine plays a kernel on
// each clocksource, whatever it runs on. A kernel on kvm-clock or Xen
// gets the pvclock page where this process has it mapped and stable;
// one on Hyper-V's clock the Hyper-V page where it is mapped; one on
// any other clocksource none, and the refusal names it.
func TestParavirtFollowsTheKernelsClocksource(t *testing.T) {
	if !pvclock.Supported {
		_, err := findParavirt()
		assert.ErrorIs(t, err, ErrUnsupported)
		t.Skip("no pvclock page reader in this build (" + runtime.GOARCH + ", or purego)")
	}
	// What this process has mapped, found without asking the kernel's
	// clocksource.
	pvMapped, hvMapped := false, false
	if maps, err := pvclock.Maps(); err == nil {
		if loc, err := pvclock.Locate(maps, pvclock.KernelRelease()); err == nil {
			_, p, err := pvclock.ProbePvclock(loc.Pvclock)
			pvMapped = err == nil && p.Stable()
			_, _, err = pvclock.ProbeHyperv(loc.Hyperv)
			hvMapped = err == nil
		}
	}
	t.Logf("this process has the pvclock page mapped and stable: %v; the Hyper-V page mapped: %v", pvMapped, hvMapped)
	for _, c := range []struct {
		clocksource string
		name        string // the kind's name; "" for none
		mapped      bool
	}{
		{"kvm-clock", "kvm-clock (pvclock, stable)", pvMapped},
		{"xen", "xen (pvclock, stable)", pvMapped},
		{"hyperv_clocksource_tsc_page", "hyperv (TSC page)", hvMapped},
		{"tsc", "", false},
		{"hpet", "", false},
	} {
		var p *paravirtPage
		var err error
		testenv.WithFiles(t, map[string]string{kernel.ClocksourcePath: c.clocksource + "\n"}, func() {
			p, err = findParavirt()
		})
		switch {
		case c.name == "":
			require.Error(t, err, c.clocksource)
			assert.ErrorIs(t, err, ErrUnsupported, c.clocksource)
			assert.Contains(t, err.Error(), fmt.Sprintf("the kernel's clocksource is %q, not a paravirtual clock", c.clocksource))
		case c.mapped:
			require.NoError(t, err, c.clocksource)
			assert.Equal(t, c.name, p.kind.name)
			assert.Equal(t, p.kind.hyperv, p.hv != nil, "%s: the page of the other kind", c.clocksource)
		default:
			require.Error(t, err, c.clocksource)
			assert.Contains(t, err.Error(), c.name, "%s: the refusal does not name the page looked for", c.clocksource)
		}
	}
}

var paravirtSink uint64

// BenchmarkParavirt compares, in one run, the reads a Clock on the
// paravirtual clock is made of: the page read in assembly and in Go (the
// reference), the bare ordered counter read under them (LFENCE; RDTSC),
// time.Since, and Now on New(Paravirt()) (design A: the page read is the
// Source's Read, under the latch). Compare ratios within one run:
//
//	go test -run '^$' -bench '^BenchmarkParavirt$' -count 8 . | tee pv.txt; benchstat pv.txt
func BenchmarkParavirt(b *testing.B) {
	page, err := foundParavirt()
	if err != nil || page.pv == nil {
		b.Skipf("no pvclock page here: %v", err)
	}
	b.Run("page-asm", func(b *testing.B) {
		var s uint64
		for b.Loop() {
			ns, _, _ := pvclock.Read(page.pv)
			s += ns
		}
		paravirtSink += s
	})
	b.Run("page-go", func(b *testing.B) {
		var s uint64
		for b.Loop() {
			ns, _, _ := page.pv.ReadWith(pvclock.TSC)
			s += ns
		}
		paravirtSink += s
	})
	b.Run("lfence-rdtsc", func(b *testing.B) {
		var s uint64
		for b.Loop() {
			s += pvclock.TSC()
		}
		paravirtSink += s
	})
	b.Run("time-since", func(b *testing.B) {
		start := time.Now()
		var s time.Duration
		for b.Loop() {
			s += time.Since(start)
		}
		paravirtSink += uint64(s)
	})
	b.Run("now", func(b *testing.B) {
		src, err := Paravirt()
		require.NoError(b, err)
		c, err := New(src)
		require.NoError(b, err)
		defer c.Close()
		var s int64
		for b.Loop() {
			s += c.nanos()
		}
		paravirtSink += uint64(s)
	})
}
