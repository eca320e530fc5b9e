package schedclock

import (
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/hwcounter"
	"github.com/schedclock/schedclock/internal/kernel"
	"github.com/schedclock/schedclock/internal/pvclock"
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
	assert.Equal(t, hwcounter.RateNanoseconds, origin)
	assert.Zero(t, errPPM)
	t.Logf("%s: %s", src.Name, desc)
}

// syntheticCopy returns a test-owned page holding this machine's real
// pvclock parameters, so that its time is the kernel's kvm-clock time
// and CLOCK_MONOTONIC_RAW follows it, and a paravirtPage on it. It
// skips where there is no real page to copy.
func syntheticCopy(t *testing.T) (*pvclock.Page, *paravirtPage) {
	real, err := foundParavirt()
	if err != nil || real.pv == nil {
		t.Skipf("no pvclock page here to copy: %v", err)
	}
	buf := make([]byte, 2*pvclock.PageSize)
	off := (pvclock.PageSize - uintptr(unsafe.Pointer(&buf[0]))%pvclock.PageSize) % pvclock.PageSize
	pg := (*pvclock.Page)(unsafe.Pointer(&buf[off]))
	t.Cleanup(func() { runtime.KeepAlive(buf) })
	pg.Publish(real.pv.Load())
	return pg, &paravirtPage{kind: real.kind, loc: real.loc, pv: pg}
}

// TestParavirtFallsBackWhenTheStableBitClears: readers on every P read a
// Source on a copy of the real page while the stable bit clears; each
// reading must be at least the largest any reader published before it
// began (a step back across goroutines shows), the page's evidence must
// say why it went, and a new Source on that page is refused.
func TestParavirtFallsBackWhenTheStableBitClears(t *testing.T) {
	pg, page := syntheticCopy(t)
	s, err := newParavirtSource(page, rawNow)
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
	_, err = newParavirtSource(page, rawNow)
	assert.ErrorIs(t, err, errUntrusted)
}

// TestParavirtReturnsToThePageWithoutSteppingBack: a Source that fell
// back returns to the page once the page is consistent again, and never
// hands out less than it did on the fallback. Here the reference runs
// 30 µs ahead once the offset is measured (within the tolerance of a
// consistent page), so the fallback runs 30 µs ahead of the page, and a
// return without its floor would step back by 30 µs.
func TestParavirtReturnsToThePageWithoutSteppingBack(t *testing.T) {
	pg, page := syntheticCopy(t)
	var ahead atomic.Int64
	s, err := newParavirtSource(page, func() int64 { return rawNow() + ahead.Load() })
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
	pg, page := syntheticCopy(t)
	s, err := newParavirtSource(page, rawNow)
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
		t.Skip("this machine has a paravirtual clock: TestParavirtHere covers it")
	}
	_, err := Paravirt()
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrUnsupported) || errors.Is(err, errUntrusted), err.Error())
	assert.True(t, strings.Contains(err.Error(), "paravirt") || strings.Contains(err.Error(), "pvclock") || strings.Contains(err.Error(), "hyperv"), err.Error())
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
