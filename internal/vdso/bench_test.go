package vdso_test

import (
	"errors"
	"testing"
	"time"

	"github.com/schedclock/schedclock/internal/vdso"
)

var sinkNs int64

func benchClock(b *testing.B, id vdso.ID) {
	c, err := vdso.Open(id)
	if errors.Is(err, vdso.ErrUnsupported) {
		b.Skip(err)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		sinkNs += c.Now()
	}
}

// The clocks through Open's path (the vDSO here, when there is one).
func BenchmarkRaw(b *testing.B)             { benchClock(b, vdso.MonotonicRaw) }
func BenchmarkBoottime(b *testing.B)        { benchClock(b, vdso.Boottime) }
func BenchmarkMonotonic(b *testing.B)       { benchClock(b, vdso.Monotonic) }
func BenchmarkMonotonicCoarse(b *testing.B) { benchClock(b, vdso.MonotonicCoarse) }
func BenchmarkRealtime(b *testing.B)        { benchClock(b, vdso.Realtime) }

// BenchmarkRawSource reads as a schedclock Source does: through a func
// value.
func BenchmarkRawSource(b *testing.B) {
	c, err := vdso.Open(vdso.MonotonicRaw)
	if err != nil {
		b.Skip(err)
	}
	read := func() uint64 { return uint64(c.Now()) }
	b.ReportAllocs()
	var sum uint64
	for b.Loop() {
		sum += read()
	}
	sinkNs += int64(sum)
}

// BenchmarkRawSyscallPath is the fallback: the raw clock_gettime system
// call Now makes without a vDSO.
func BenchmarkRawSyscallPath(b *testing.B) {
	c, err := vdso.Open(vdso.MonotonicRaw)
	if err != nil {
		b.Skip(err)
	}
	s := vdso.SyscallClock(c)
	b.ReportAllocs()
	for b.Loop() {
		sinkNs += s.Now()
	}
}

// BenchmarkTimeSince is the runtime's own vDSO read (CLOCK_MONOTONIC).
func BenchmarkTimeSince(b *testing.B) {
	start := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		sinkNs += int64(time.Since(start))
	}
}
