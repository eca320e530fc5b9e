//go:build linux || darwin

package vdso_test

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"golang.org/x/sys/unix"

	"github.com/schedclock/schedclock/internal/vdso"
)

// TestCostBars measures, in one run, Raw and Boottime against time.Since
// and the unix.ClockGettime system call, and checks the bars (each
// at most 1.5× time.Since and 0.1× the system call) when VDSO_BARS=1:
// timings on a shared machine are not a default test. Each figure is the
// best of five rounds.
func TestCostBars(t *testing.T) {
	if os.Getenv("VDSO_BARS") == "" {
		t.Skip("set VDSO_BARS=1 to measure the cost bars")
	}
	raw, err := vdso.Open(vdso.MonotonicRaw)
	if err != nil {
		t.Skip(err)
	}
	boot, err := vdso.Open(vdso.Boottime)
	if err != nil {
		t.Skip(err)
	}
	var sink int64
	bench := map[string]func(*testing.B){
		"Raw": func(b *testing.B) {
			for b.Loop() {
				sink += raw.Now()
			}
		},
		"Boottime": func(b *testing.B) {
			for b.Loop() {
				sink += boot.Now()
			}
		},
		"time.Since": func(b *testing.B) {
			start := time.Now()
			for b.Loop() {
				sink += int64(time.Since(start))
			}
		},
		"syscall": func(b *testing.B) {
			var ts unix.Timespec
			for b.Loop() {
				_ = unix.ClockGettime(unix.CLOCK_MONOTONIC_RAW, &ts)
				sink += ts.Nano()
			}
		},
	}
	best := map[string]float64{}
	for range 5 {
		for name, f := range bench {
			ns := float64(testing.Benchmark(f).NsPerOp())
			if b, ok := best[name]; !ok || ns < b {
				best[name] = ns
			}
		}
	}
	t.Logf("ns/op (best of 5): %v; %s", best, raw.Path())
	for _, name := range []string{"Raw", "Boottime"} {
		assert.LessOrEqual(t, best[name], 1.5*best["time.Since"], "%s: %.1f ns, time.Since %.1f ns", name, best[name], best["time.Since"])
		assert.LessOrEqual(t, best[name], 0.1*best["syscall"], "%s: %.1f ns, the system call %.1f ns", name, best[name], best["syscall"])
	}
	_ = sink
}
