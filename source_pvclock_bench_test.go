package schedclock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/pvclock"
)

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
