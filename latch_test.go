package schedclock

import (
	"math"
	"math/big"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLatchLayout(t *testing.T) {
	// seq and bank 0 fill exactly one 64-byte line; bank 1 the next one.
	assert.Equal(t, uintptr(0), unsafe.Offsetof(latch{}.seq))
	assert.Equal(t, uintptr(8), unsafe.Offsetof(latch{}.banks))
	assert.Equal(t, uintptr(56), unsafe.Sizeof(bank{}))
	assert.Equal(t, uintptr(64), unsafe.Offsetof(latch{}.banks)+unsafe.Sizeof(bank{}))
	// Every field a reader loads on the fast path is within the first line.
	b := &latch{}
	for _, f := range []unsafe.Pointer{unsafe.Pointer(&b.banks[0].read), unsafe.Pointer(&b.banks[0].epochCyc),
		unsafe.Pointer(&b.banks[0].epochNs), unsafe.Pointer(&b.banks[0].fastMax), unsafe.Pointer(&b.banks[0].base),
		unsafe.Pointer(&b.banks[0].scale), unsafe.Pointer(&b.banks[0].offset)} {
		assert.Less(t, uintptr(f)-uintptr(unsafe.Pointer(b))+8, uintptr(65))
	}
	// The latch opens the Clock, and the Clock is a 64-byte multiple size
	// class, so live latches are 64-byte aligned.
	assert.Equal(t, uintptr(0), unsafe.Offsetof(Clock{}.latch))
	assert.Equal(t, uintptr(clockSize), unsafe.Sizeof(Clock{}))
	assert.Zero(t, clockSize%64)
	var clocks []*Clock
	for i := 0; i < 16; i++ {
		c, err := New(Portable())
		require.NoError(t, err)
		clocks = append(clocks, c)
		assert.Zero(t, uintptr(unsafe.Pointer(&c.latch))%64, "latch of clock %d at %p", i, &c.latch)
	}
	for _, c := range clocks {
		require.NoError(t, c.Close())
	}
	assert.Zero(t, uintptr(unsafe.Pointer(&Default().latch))%64, "default clock's latch")
}

func TestScalePacking(t *testing.T) {
	for _, tc := range []struct {
		mult, shift uint32
		bits        int
	}{{1, 1, 1}, {4096000000, 10, 64}, {699051, 21, 56}, {^uint32(0), 63, 8}} {
		m, s, mask := unpackScale(packScale(tc.mult, tc.shift, uint64(tc.bits)))
		assert.Equal(t, tc.mult, m)
		assert.Equal(t, tc.shift, s)
		assert.Equal(t, maskOf(tc.bits), mask)
	}
}

// snapshot reads the bank readers would use, by the reader protocol.
func (l *latch) snapshot() (ln [7]uint64) {
	for {
		seq := l.seq.Load()
		b := &l.banks[seq&1]
		ln = [7]uint64{uint64(uintptr(atomic.LoadPointer(&b.read))), b.epochCyc.Load(), uint64(b.epochNs.Load()),
			b.fastMax.Load(), b.base.Load(), b.scale.Load(), uint64(b.offset.Load())}
		if l.seq.Load() == seq {
			return ln
		}
	}
}

// consistent reports whether a snapshot is one of the lines written by
// testLine: every field is derived from the same k.
func consistent(s [7]uint64, reads []func() uint64) bool {
	k := s[1]
	want := testLine(k, reads)
	return s == [7]uint64{uint64(uintptr(funcPtr(want.read))), want.epochCyc, uint64(want.epochNs),
		want.fastMax(), want.frac - want.epochCyc*uint64(want.conv.mult),
		packScale(want.conv.mult, want.conv.shift, uint64(bitsOf(want.conv.mask))), uint64(want.pureOffset())}
}

// testLine is the k-th of a family of lines whose every field differs
// with k; every third one is a pure offset (see bank.offset).
func testLine(k uint64, reads []func() uint64) line {
	ln := line{
		read:     reads[k%uint64(len(reads))],
		conv:     conversion{mult: uint32(1000 + k%4096), shift: uint32(1 + k%20), mask: maskOf(int(8 + k%57))},
		epochCyc: k,
		epochNs:  int64(3 * k),
		frac:     k % 2,
	}
	if k%3 == 0 {
		ln.conv.mult, ln.frac = 1<<ln.conv.shift, 0
	}
	return ln
}

func TestLatchReadersNeverSeeATornBank(t *testing.T) {
	var l latch
	reads := []func() uint64{readSuspended, readMono, func() uint64 { return 7 }}
	first := testLine(0, reads)
	l.publish(&first, noStep)

	const readers = 4
	var stop atomic.Bool
	var torn, total atomic.Int64
	var wg sync.WaitGroup
	for r := 0; r < readers; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if !consistent(l.snapshot(), reads) {
					torn.Add(1)
				}
				total.Add(1)
			}
		}()
	}
	var k uint64
	for k < 4096 || total.Load() < 100_000 {
		k++
		ln := testLine(k, reads)
		l.publish(&ln, noStep)
		if k%64 == 0 {
			runtime.Gosched()
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d snapshots, %d publications", total.Load(), k)
	assert.Zero(t, torn.Load(), "torn snapshots out of %d, %d publications", total.Load(), k)
	assert.Greater(t, k, uint64(100))
}

// TestLatchWriterStoppedAtEveryStep stops the writer after each of its
// stores and checks that readers still finish, each with a complete copy
// of either the old or the new data.
func TestLatchWriterStoppedAtEveryStep(t *testing.T) {
	var l latch
	reads := []func() uint64{readSuspended, readMono}
	old, next := testLine(1, reads), testLine(2, reads)
	l.publish(&old, noStep)
	var steps []string
	l.publish(&next, func(step string) {
		steps = append(steps, step)
		done := make(chan [7]uint64)
		go func() { done <- l.snapshot() }()
		select {
		case s := <-done:
			assert.True(t, consistent(s, reads), "after %s: inconsistent snapshot", step)
			assert.Contains(t, []uint64{1, 2}, s[1], "after %s", step)
			if step == "seq.odd" || step == "seq.even" {
				assert.Equal(t, uint64(2), s[1], "after %s readers must see the new data", step)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("a reader waited for the writer stopped after %s", step)
		}
	})
	assert.Len(t, steps, 16)
}

// referenceNanos is what a line must read at counter value cyc, in
// arbitrary precision from the definition: the masked delta, read as 0 in
// the negative zone (top eighth of the mask), times mult, plus the
// remainder, shifted, added to the epoch and saturated at math.MaxInt64.
func referenceNanos(ln line, cyc uint64) int64 {
	mask := ln.conv.mask
	delta := (cyc - ln.epochCyc) & mask
	if delta > mask-mask>>3 {
		delta = 0
	}
	v := new(big.Int).SetUint64(delta)
	v.Mul(v, new(big.Int).SetUint64(uint64(ln.conv.mult)))
	v.Add(v, new(big.Int).SetUint64(ln.frac))
	v.Rsh(v, uint(ln.conv.shift))
	v.Add(v, big.NewInt(ln.epochNs))
	if !v.IsInt64() {
		return math.MaxInt64 // the delta is never negative: only the top can be passed
	}
	return v.Int64()
}

// FuzzLine checks every reader path (the assembly on amd64, the Go fast
// path, the slow path with its clamp, mask and 128-bit product) and the
// writer's evaluation against the definition, for any width, rate, epoch
// and counter value, including counters that set bits above their width.
func FuzzLine(f *testing.F) {
	f.Add(uint64(24_000_000), uint8(64), uint64(5), int64(1000), uint64(7), uint64(1<<40))
	f.Add(uint64(1000), uint8(8), uint64(250), int64(0), uint64(0), uint64(3))
	f.Add(uint64(3_000_000_000), uint8(56), uint64(1<<55), int64(1<<50), uint64(123), uint64(1<<55-1))
	f.Add(uint64(100), uint8(16), uint64(9), int64(-5), uint64(1), uint64(1<<20))
	// A 64-bit counter 2^61+1 cycles behind the epoch: just outside the
	// negative zone, so far ahead that the sum passes math.MaxInt64.
	f.Add(uint64(1e9), uint8(64), uint64(5000), int64(5000), uint64(0), uint64(5000+(1<<64-1)-(1<<61)))
	// An epoch near the top: the fast path itself must saturate.
	f.Add(uint64(1e9), uint8(64), uint64(0), int64(math.MaxInt64-10), uint64(0), uint64(100))
	counter := &FakeCounter{}
	c, err := New(counter.Source("fuzz", 64, 1e9))
	if err != nil {
		f.Fatal(err)
	}
	_ = c.Close() // no refresh goroutine: this test publishes by hand
	hw, _, _, hwErr := probeHardware()
	f.Fuzz(func(t *testing.T, rate uint64, width uint8, epochCyc uint64, epochNs int64, frac, cyc uint64) {
		conv, err := newConversion(Source{Name: "fuzz", Read: counter.Read, Bits: int(width), Rate: rate})
		if err != nil {
			return
		}
		ln := line{read: counter.Read, conv: conv, epochCyc: epochCyc & conv.mask, epochNs: epochNs,
			frac: frac & (uint64(1)<<conv.shift - 1)}
		want := referenceNanos(ln, cyc)
		if got, _ := ln.at(cyc); got != want {
			t.Fatalf("line.at(%d) = %d, want %d (%+v)", cyc, got, want, ln)
		}
		c.st.mu.Lock()
		c.publishLocked(ln)
		c.unlock()
		counter.Set(cyc)
		if got := c.nanos(); got != want {
			t.Fatalf("Now at %d = %d, want %d (%+v)", cyc, got, want, ln)
		}
		if got := c.now(); got != want {
			t.Fatalf("generic now at %d = %d, want %d (%+v)", cyc, got, want, ln)
		}
		if hwErr != nil {
			return
		}
		// The same line on the real counter, epochCyc counter cycles back
		// (or, read as negative, ahead): the reading must lie between the
		// definition at counter values read just before and just after.
		ln.read = hw.Read
		ln.epochCyc = (hw.Read() - epochCyc) & conv.mask
		c.st.mu.Lock()
		c.publishLocked(ln)
		c.unlock()
		c1 := hw.Read()
		got := c.nanos()
		c2 := hw.Read()
		before := referenceNanos(ln, c1)
		after := referenceNanos(ln, c2)
		// Only a bracket in which the counter moved less than an eighth of
		// its width, and did not cross into the negative zone, bounds it.
		if c2-c1 <= conv.mask>>3 && before <= after && (got < before || got > after) {
			t.Fatalf("Now on %s = %d, outside [%d, %d] (%+v)", hw.Name, got, before, after, ln)
		}
	})
}
