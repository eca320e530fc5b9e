package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// checkBuckets checks that buckets cover sorted exactly: contiguous, from
// the minimum to above the maximum, counts summing to the samples, and
// each count what its range holds.
func checkBuckets(t *testing.T, name string, sorted []int64, buckets []bucket) {
	t.Helper()
	if len(buckets) == 0 {
		t.Fatalf("%s: no buckets for %d samples", name, len(sorted))
	}
	if buckets[0].lo != time.Duration(sorted[0]) {
		t.Errorf("%s: first bucket starts at %v, the minimum is %v", name, buckets[0].lo, time.Duration(sorted[0]))
	}
	if last := buckets[len(buckets)-1]; last.hi <= time.Duration(sorted[len(sorted)-1]) {
		t.Errorf("%s: last bucket ends at %v, not above the maximum %v", name, last.hi, time.Duration(sorted[len(sorted)-1]))
	}
	sum := 0
	for i, b := range buckets {
		if b.hi <= b.lo {
			t.Errorf("%s: bucket %d is empty or reversed: [%v, %v)", name, i, b.lo, b.hi)
		}
		if i > 0 && b.lo != buckets[i-1].hi {
			t.Errorf("%s: bucket %d starts at %v, the one before ends at %v", name, i, b.lo, buckets[i-1].hi)
		}
		in := 0
		for _, v := range sorted {
			if time.Duration(v) >= b.lo && time.Duration(v) < b.hi {
				in++
			}
		}
		if in != b.count {
			t.Errorf("%s: bucket %d [%v, %v) counts %d, holds %d", name, i, b.lo, b.hi, b.count, in)
		}
		sum += b.count
	}
	if sum != len(sorted) {
		t.Errorf("%s: bucket counts sum to %d, want the %d samples", name, sum, len(sorted))
	}
}

func checkStats(t *testing.T, name string, s stats) {
	t.Helper()
	ordered := []time.Duration{s.min, s.p50, s.p90, s.p99, s.p999, s.max}
	for i := 1; i < len(ordered); i++ {
		if ordered[i] < ordered[i-1] {
			t.Errorf("%s: min, p50, p90, p99, p99.9, max = %v: not in order", name, ordered)
			break
		}
	}
	// A coarse counter (the emulated one under qemu moves in steps of
	// microseconds) can time a short piece of work as 0.
	if s.min < 0 || s.avg < s.min || s.avg > s.max {
		t.Errorf("%s: min %v, mean %v, max %v", name, s.min, s.avg, s.max)
	}
}

// The whole program, briefly: every clock times the workload many times,
// its histogram accounts for every sample, its percentiles are ordered,
// its reading costs something, and the output shows all of it.
func TestRunBriefly(t *testing.T) {
	const perTimer = 8 * time.Millisecond
	for _, w := range workloads {
		t.Run(w.name, func(t *testing.T) {
			var out bytes.Buffer
			results := run(&out, w, perTimer, 14)
			if len(results) != len(timers) {
				t.Fatalf("%d results for %d clocks", len(results), len(timers))
			}
			text := out.String()
			for _, r := range results {
				name := r.timer.name
				// sample takes 64 at least, however busy the machine.
				if r.stats.n < 64 || r.stats.n != len(r.sorted) {
					t.Fatalf("%s: %d samples (%d sorted) in %v", name, r.stats.n, len(r.sorted), perTimer)
				}
				checkStats(t, name, r.stats)
				checkBuckets(t, name, r.sorted, r.buckets)
				if len(r.buckets) > 14 {
					t.Errorf("%s: %d rows, asked for at most 14", name, len(r.buckets))
				}
				if r.overhead <= 0 {
					t.Errorf("%s: a reading costs %v ns", name, r.overhead)
				}
				if !strings.Contains(text, "Timed with "+name) || !strings.Contains(text, "  "+name+" ") {
					t.Errorf("the output does not show %s's figures:\n%s", name, text)
				}
			}
			if got := strings.Count(text, "p99.9 "); got != len(timers) {
				t.Errorf("%d percentile lines, want %d:\n%s", got, len(timers), text)
			}
			if strings.Count(text, "█") == 0 {
				t.Errorf("no bars drawn:\n%s", text)
			}
		})
	}
}

func TestPercentileIsNearestRank(t *testing.T) {
	sorted := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 5}, {90, 9}, {99, 10}, {99.9, 10}, {100, 10}, {0, 1}, {10, 1}, {11, 2}} {
		if got := percentile(sorted, c.p); got != c.want {
			t.Errorf("percentile(1..10, %v) = %v, want %v", c.p, got, c.want)
		}
	}
}

func TestHistogramOfKnownSamples(t *testing.T) {
	for _, c := range []struct {
		name   string
		sorted []int64
	}{
		{"1..1000", seq(1, 1000, 1)},
		{"one value", []int64{700, 700, 700}},
		{"one sample", []int64{5}},
		{"coarse clock", seq(1000, 2000, 100)},
		{"long tail", append(seq(700, 800, 1), 5_000_000, 60_000_000)},
	} {
		b := histogram(c.sorted, 14)
		checkBuckets(t, c.name, c.sorted, b)
		if len(b) > 14 {
			t.Errorf("%s: %d buckets, asked for at most 14", c.name, len(b))
		}
	}
	// The body is even: 1..1000 has p99 = 990, so 10 buckets of 99.
	b := histogram(seq(1, 1000, 1), 14)
	if b[0].hi-b[0].lo != 99 || b[0].count != 99 {
		t.Errorf("1..1000: first bucket [%v, %v) holds %d, want 99 values 99 wide", b[0].lo, b[0].hi, b[0].count)
	}
}

func seq(from, to, step int64) []int64 {
	var s []int64
	for v := from; v <= to; v += step {
		s = append(s, v)
	}
	return s
}

func TestBar(t *testing.T) {
	if got := bar(10, 10, 4); got != "████" {
		t.Errorf("full bar = %q", got)
	}
	if got := bar(5, 10, 4); got != "██" {
		t.Errorf("half bar = %q", got)
	}
	if got := bar(1, 1000, 4); got != "▏" {
		t.Errorf("a bucket that is not empty must show: %q", got)
	}
	if got := bar(0, 10, 4); got != "" {
		t.Errorf("empty bucket = %q", got)
	}
}

func TestUnknownWorkload(t *testing.T) {
	if _, err := findWorkload("fft"); err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Errorf("findWorkload(fft) = %v, want an error naming the workloads", err)
	}
}
