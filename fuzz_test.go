package schedclock

import (
	"math"
	"math/big"
	"testing"
)

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
		c.mu.Lock()
		c.publishLocked(ln)
		c.mu.Unlock()
		counter.Set(cyc)
		if got := c.Now(); got != want {
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
		c.mu.Lock()
		c.publishLocked(ln)
		c.mu.Unlock()
		c1 := hw.Read()
		got := c.Now()
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
