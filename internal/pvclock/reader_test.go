package pvclock

import (
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/race"
)

// rates are the parameter sets the synthetic writers cycle through: 1,
// 0.75 and 0.3125 ns per count, far enough apart that a reading made
// with the previous set differs from one made with the current set.
var rates = []struct {
	mul   uint32
	shift int8
}{{1 << 31, 1}, {0xC0000000, 0}, {0xA0000000, -1}}

// segment is one parameter set of a synthetic page's timeline, valid
// from stamp (the writer's TSC once the version was odd) to the next
// segment's stamp.
type segment struct {
	stamp uint64
	p     Pvclock
}

// timeline is the page's own time at TSC value t: the parameters of the
// last segment published at or before t. It is continuous (each segment
// starts where the last one was) and increasing.
func timeline(segs []segment, t uint64) uint64 {
	i := sort.Search(len(segs), func(i int) bool { return segs[i].stamp > t }) - 1
	if i < 0 {
		i = 0
	}
	return segs[i].p.Cycles(t) & (1<<63 - 1)
}

// next returns the parameters that continue cur's time at tsc with rate
// set i.
func next(cur Pvclock, tsc uint64, i int) Pvclock {
	r := rates[i%len(rates)]
	return Pvclock{TSCTimestamp: tsc, SystemTime: cur.Cycles(tsc), Mul: r.mul, Shift: r.shift, Flags: TSCStableBit}
}

// hooked is a TSC read that runs each hook once, on the call it is
// queued for, before reading the real TSC, and remembers the value: the
// deterministic tests below put a writer's steps between a reader's
// loads and its re-check this way.
type hooked struct {
	calls int
	hooks map[int]func()
	last  uint64
}

func (h *hooked) tsc() uint64 {
	h.calls++
	if f := h.hooks[h.calls]; f != nil {
		f()
	}
	h.last = fakeTSC(h.calls)
	return h.last
}

// fakeTSC is a counter the deterministic tests control: 1e6 counts per
// call, so that a reading made with the wrong parameters is off by
// hundreds of thousands of ns.
func fakeTSC(call int) uint64 { return 1<<40 + uint64(call)*1_000_000 }

func newSyntheticPage(t *testing.T, version uint32, p Pvclock) *Page {
	mem, _ := alignedPage(t)
	pg := (*Page)(mem)
	pg.SetVersion(version)
	pg.Publish(p)
	return pg
}

// TestGoReaderFollowsEveryUpdate drives the Go reader (the reference)
// through each step of an update at each point of its protocol, with a
// TSC read that runs the writer's steps: an update between the loads
// and the re-check, an update held half-written (odd version, torn
// fields) across several tries, a version that wraps past 2^32, and a
// stable bit that clears. Each reading must equal the last completed
// parameters at the TSC value the reader read: anything else used
// parameters the page no longer (or not yet) held.
func TestGoReaderFollowsEveryUpdate(t *testing.T) {
	// After the first publication the version is 1<<32-2 or 1<<32-4:
	// the updates below wrap it during step 1 or step 2.
	for _, start := range []uint32{10, 1<<32 - 4, 1<<32 - 6, 1<<32 - 7} {
		first := Pvclock{TSCTimestamp: fakeTSC(0), SystemTime: 5_000_000_000, Mul: rates[0].mul, Shift: rates[0].shift, Flags: TSCStableBit}
		pg := newSyntheticPage(t, start, first)
		published := first
		v0 := pg.version.Load()
		h := &hooked{hooks: map[int]func(){}}
		read := func() (uint64, bool) { ns, _, ok := pg.ReadWith(h.tsc); return ns, ok }

		// 1. An update completes between the reader's loads and its re-check.
		h.hooks[h.calls+1] = func() {
			published = next(published, fakeTSC(h.calls)-1, 1)
			pg.Publish(published)
		}
		ns, ok := read()
		require.True(t, ok)
		assert.Equal(t, published.Cycles(h.last), ns, "version %#x: a reading with the parameters of before the update", pg.version.Load())

		// 2. An update held half-written for two tries, completed during the third.
		var torn Pvclock
		base := h.calls
		h.hooks[base+1] = func() {
			pg.BeginUpdate()
			torn = next(published, fakeTSC(h.calls)-1, 2)
			pg.tscTimestamp.Store(torn.TSCTimestamp)
		}
		h.hooks[base+3] = func() {
			pg.Store(torn)
			pg.EndUpdate()
			published = torn
		}
		ns, ok = read()
		require.True(t, ok)
		assert.Equal(t, published.Cycles(h.last), ns, "version %#x: a reading with torn or stale parameters", pg.version.Load())
		assert.Equal(t, base+4, h.calls, "the reader succeeds on the first try after the update")
		assert.Equal(t, v0+4, pg.version.Load(), "two updates advance the version by 4, wrapping")

		// 3. The stable bit clears: the reader reports !ok, as the vDSO
		// falls back to the system call.
		published.Flags = 0
		pg.Publish(published)
		_, ok = read()
		assert.False(t, ok, "a reading from a page without PVCLOCK_TSC_STABLE_BIT")
	}
}

// TestGoReaderGivesUpOnAStuckWriter: a page held odd forever costs a
// reader maxTries tries, then !ok, never a hang.
func TestGoReaderGivesUpOnAStuckWriter(t *testing.T) {
	pg := newSyntheticPage(t, 4, Pvclock{Mul: 1 << 31, Shift: 1, Flags: TSCStableBit})
	pg.BeginUpdate()
	h := &hooked{}
	_, _, ok := pg.ReadWith(h.tsc)
	assert.False(t, ok)
	assert.Equal(t, maxTries, h.calls)
}

// reading is one synthetic-page reading bracketed by ordered TSC reads.
type reading struct {
	before, ns, after uint64
}

// driveSynthetic runs readers on a synthetic page while a writer
// goroutine updates it continuously, holding each update half-written
// (odd version, new tsc_timestamp, old system_time and rate) for as
// long as a reader needs to try maxTries times, and then clears the
// stable bit. Every reading must lie within the page's own timeline at
// its brackets; after the stable bit clears, every reader must report
// !ok.
func driveSynthetic(t *testing.T, read func(*Page) (uint64, bool)) {
	require.True(t, Supported, "needs the TSC")
	start := TSC()
	first := Pvclock{TSCTimestamp: start, SystemTime: 1 << 40, Mul: rates[0].mul, Shift: rates[0].shift, Flags: TSCStableBit}
	pg := newSyntheticPage(t, 1<<32-8, first) // wraps after four updates
	segs := []segment{{start, first}}

	updates := 300
	if race.Enabled {
		updates = 60
	}
	readers := max(2, runtime.GOMAXPROCS(0))
	var stop, unstable atomic.Bool
	var okCount, failCount, afterUnstable atomic.Int64
	results := make([][]reading, readers)
	var wg sync.WaitGroup
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out []reading
			for !stop.Load() {
				wasUnstable := unstable.Load()
				before := TSC()
				ns, ok := read(pg)
				after := TSC()
				if wasUnstable {
					if ok {
						t.Errorf("reader %d: ok reading %d after the stable bit cleared", r, ns)
						return
					}
					afterUnstable.Add(1)
					continue
				}
				if ok {
					okCount.Add(1)
					if len(out) < 1<<16 {
						out = append(out, reading{before, ns, after})
					}
				} else {
					failCount.Add(1)
				}
				runtime.Gosched()
			}
			results[r] = out
		}()
	}

	// hold spins for about as long as a reader's maxTries tries, measured
	// by the readers' own step (a TSC read) rather than a wall-clock time.
	hold := func() {
		for range 2 * maxTries {
			TSC()
		}
	}
	cur := first
	for i := range updates {
		pg.BeginUpdate() // an atomic store: the TSC below is read after readers can see the odd version
		stamp := TSC()
		nx := next(cur, stamp, i+1)
		pg.tscTimestamp.Store(nx.TSCTimestamp) // torn: new stamp, old time and rate
		hold()
		pg.Store(nx)
		pg.EndUpdate()
		segs = append(segs, segment{stamp, nx})
		cur = nx
		hold()
		runtime.Gosched()
	}
	cur.Flags = 0
	pg.Publish(cur)
	unstable.Store(true)
	// Every reader reads the unstable page a few times (a reader that
	// returns early has already failed the test).
	for afterUnstable.Load() < int64(16*readers) && !t.Failed() {
		runtime.Gosched()
	}
	stop.Store(true)
	wg.Wait()

	bad := 0
	for r, out := range results {
		for _, rd := range out {
			lo, hi := timeline(segs, rd.before), timeline(segs, rd.after)
			if rd.ns < lo || rd.ns > hi {
				if bad++; bad <= 5 {
					t.Errorf("reader %d: %d outside the page's time [%d, %d] at its brackets (%d below, %d above)", r, rd.ns, lo, hi, int64(lo-rd.ns), int64(rd.ns-hi))
				}
			}
		}
	}
	assert.Zero(t, bad, "readings outside the page's timeline")
	assert.NotZero(t, okCount.Load(), "no reading succeeded")
	t.Logf("%d updates (version wrapped past 2^32), %d readings checked, %d gave up while an update was held", updates, okCount.Load(), failCount.Load())
}

func TestAsmReaderOnASyntheticPage(t *testing.T) {
	if !Supported {
		t.Skip("no assembly reader in this build (" + runtime.GOARCH + ", or purego)")
	}
	driveSynthetic(t, func(pg *Page) (uint64, bool) { ns, _, ok := Read(pg); return ns, ok })
}

func TestGoReaderOnASyntheticPage(t *testing.T) {
	if !Supported {
		t.Skip("no TSC to read in this build (" + runtime.GOARCH + ", or purego)")
	}
	driveSynthetic(t, func(pg *Page) (uint64, bool) { ns, _, ok := pg.ReadWith(TSC); return ns, ok })
}

// TestAsmReaderMatchesGoReader: on one page, with the same TSC value
// (a page stamped 2^62 counts ahead of the TSC makes the TSC's
// contribution vanish, and system_time carries the case), both readers
// compute the same nanoseconds for every shift and the S64_MAX mask,
// under the same version.
func TestAsmReaderMatchesGoReader(t *testing.T) {
	if !Supported {
		t.Skip("no assembly reader in this build")
	}
	mem, _ := alignedPage(t)
	pg := (*Page)(mem)
	for _, sys := range []uint64{0, 1 << 62, 1<<64 - 1} {
		for _, r := range rates {
			pg.Publish(Pvclock{TSCTimestamp: TSC() + 1<<62, SystemTime: sys, Mul: r.mul, Shift: r.shift, Flags: TSCStableBit})
			a, va, okA := Read(pg)
			g, vg, okG := pg.ReadWith(TSC)
			require.True(t, okA && okG)
			assert.Equal(t, g, a)
			assert.Equal(t, vg, va)
			assert.Equal(t, pg.version.Load(), va)
			assert.Equal(t, sys&(1<<63-1), a)
		}
	}
	pg.Publish(Pvclock{SystemTime: 1, Mul: 1 << 31, Flags: 0})
	_, _, ok := Read(pg)
	assert.False(t, ok, "a reading from a page without PVCLOCK_TSC_STABLE_BIT")
	_ = unsafe.Pointer(pg)
}

// belowStampReaders are the page readers the below-stamp and
// plausibility rules bind: the Go reader with a TSC the test picks, and
// the assembly reader with the real TSC.
func belowStampReaders() map[string]func(pg *Page, tsc uint64) (uint64, bool) {
	readers := map[string]func(pg *Page, tsc uint64) (uint64, bool){
		"ReadWith": func(pg *Page, tsc uint64) (uint64, bool) {
			ns, _, ok := pg.ReadWith(func() uint64 { return tsc })
			return ns, ok
		},
	}
	if Supported {
		readers["Read"] = func(pg *Page, _ uint64) (uint64, bool) { ns, _, ok := Read(pg); return ns, ok }
	}
	return readers
}

// TestReadersHoldStillBelowTheStamp: a TSC value below the page's
// tsc_timestamp (a vCPU a few counts behind the one the page was written
// for, or a page stamped ahead) is no motion, as the kernel's
// vdso_calc_ns treats it: the reading is the page's system_time, never
// the wrapped delta (some 2^63 ns, centuries ahead).
func TestReadersHoldStillBelowTheStamp(t *testing.T) {
	mem, _ := alignedPage(t)
	pg := (*Page)(mem)
	for name, read := range belowStampReaders() {
		for _, behind := range []uint64{1, 1000, 1 << 40} {
			for _, r := range rates {
				// The assembly reader reads the real TSC: stamp the page
				// far enough ahead of it that it stays behind.
				now := TSC()
				if !Supported {
					now = 1 << 50
				}
				stamp := now + behind + 1<<41
				pg.Publish(Pvclock{TSCTimestamp: stamp, SystemTime: 5e18, Mul: r.mul, Shift: r.shift, Flags: TSCStableBit})
				ns, ok := read(pg, stamp-behind)
				require.True(t, ok, name)
				assert.Equal(t, uint64(5e18), ns, "%s: %d counts below the stamp, mul %#x shift %d: %d ns past the page's time", name, behind, r.mul, r.shift, int64(ns-5e18))
			}
		}
	}
}

// TestReadersRefuseImplausibleParameters: a page whose parameters no
// hypervisor writes (tsc_shift outside -31..31, a zero multiplier) is
// not time: the readers report !ok, as for a page under update, rather
// than a reading centuries ahead or one that never moves.
func TestReadersRefuseImplausibleParameters(t *testing.T) {
	mem, _ := alignedPage(t)
	pg := (*Page)(mem)
	for name, read := range belowStampReaders() {
		for _, p := range []Pvclock{
			{Mul: 0x80000000, Shift: 40},
			{Mul: 0x80000000, Shift: 127},
			{Mul: 0x80000000, Shift: -40},
			{Mul: 0x80000000, Shift: -128},
			{Mul: 0, Shift: -1},
		} {
			p.TSCTimestamp, p.SystemTime, p.Flags = 1<<20, 1e18, TSCStableBit
			pg.Publish(p)
			ns, ok := read(pg, 1<<30)
			assert.False(t, ok, "%s: mul %#x shift %d read as %d ns", name, p.Mul, p.Shift, ns)
		}
	}
}
