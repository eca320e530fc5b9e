package main

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/internal/measure"
)

// A workload is one call of real work, the thing being timed.
type workload struct {
	name, what string
	setup      func() func()
}

var workloads = []workload{
	{"sha256", "sha256 of 1 KiB", newSHA256},
	{"json", "json.Marshal of a 7-field log record", newJSON},
	{"map", "16 inserts, lookups and deletes in a map of 64Ki entries", newMap},
}

func findWorkload(name string) (workload, error) {
	var names []string
	for _, w := range workloads {
		if w.name == name {
			return w, nil
		}
		names = append(names, w.name)
	}
	return workload{}, fmt.Errorf("unknown workload %q (have %s)", name, strings.Join(names, ", "))
}

// workSink keeps the compiler from dropping the work.
var workSink uint64

func newSHA256() func() {
	buf := make([]byte, 1024)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	return func() {
		sum := sha256.Sum256(buf)
		buf[0] = sum[0] // each call hashes different data
		workSink += uint64(sum[1])
	}
}

type logRecord struct {
	Time    int64             `json:"time"`
	Level   string            `json:"level"`
	Message string            `json:"msg"`
	Request uint64            `json:"request_id"`
	Latency float64           `json:"latency_ms"`
	Path    string            `json:"path"`
	Labels  map[string]string `json:"labels"`
}

func newJSON() func() {
	rec := logRecord{Level: "info", Message: "request served", Path: "/api/v1/items",
		Labels: map[string]string{"region": "eu-west-1", "tier": "gold"}}
	return func() {
		rec.Time++
		rec.Request += 7
		rec.Latency = float64(rec.Request%1000) / 10
		out, err := json.Marshal(&rec)
		if err != nil {
			panic(err)
		}
		workSink += uint64(len(out))
	}
}

func newMap() func() {
	const size = 1 << 16
	m := make(map[uint64]uint64, size)
	var x uint64 = 88172645463325252
	next := func() uint64 { // xorshift: keys spread over the whole map
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return x
	}
	for range size {
		m[next()%(4*size)] = x
	}
	return func() {
		for range 16 {
			k := next() % (4 * size)
			m[k] = x
			workSink += m[(k*31)%(4*size)]
			delete(m, (k*17)%(4*size))
		}
	}
}

// A timer times one call of work with one clock, the way a user would
// write it.
type timer struct {
	name  string
	timed func(work func()) time.Duration
	// loop reads the clock n times; it measures the clock's cost per call.
	loop func(n int) int64
}

var timers = []timer{
	{"schedclock.Now", timeWithSchedclock, loopSchedclock},
	{"time.Now", timeWithTimeNow, loopTimeNow},
}

func timeWithSchedclock(work func()) time.Duration {
	start := schedclock.Now()
	work()
	return schedclock.Since(start)
}

func timeWithTimeNow(work func()) time.Duration {
	start := time.Now()
	work()
	return time.Since(start)
}

//go:noinline
func loopSchedclock(n int) (sum int64) {
	for range n {
		sum += int64(schedclock.Now())
	}
	return sum
}

//go:noinline
func loopTimeNow(n int) (sum int64) {
	for range n {
		sum += int64(time.Now().Nanosecond())
	}
	return sum
}

//go:noinline
func loopEmpty(n int) (sum int64) {
	for i := range n {
		sum += int64(i)
	}
	return sum
}

var loopSink int64

func timeLoop(loop func(int) int64, n int) time.Duration {
	start := time.Now()
	loopSink += loop(n)
	return time.Since(start)
}

// overhead is what one call of a clock costs in ns, beyond the loop
// around it: a loop of n calls against the same loop with nothing in it,
// each the fastest of a few tries, alternated so that both see the same
// machine.
func overhead(loop func(int) int64, n int) float64 {
	best, bestEmpty := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	for range 5 {
		best = min(best, timeLoop(loop, n))
		bestEmpty = min(bestEmpty, timeLoop(loopEmpty, n))
	}
	return max(0, float64(best-bestEmpty)/float64(n))
}

// calibrateCalls returns how many clock calls take about d.
func calibrateCalls(d time.Duration) int {
	return measure.LoopLength(func(n int) time.Duration { return timeLoop(loopTimeNow, n) }, d, 8, 1000)
}

// sample times work with every timer for about perTimer each, in slices
// of slice alternating between the timers, so that a noisy moment of the
// machine is shared between them. It returns the durations in ns, per
// timer.
func sample(work func(), perTimer, slice time.Duration) [][]int64 {
	out := make([][]int64, len(timers))
	for i := range timers {
		work() // warm up
		timers[i].timed(work)
	}
	spent := make([]time.Duration, len(timers))
	for spent[len(timers)-1] < perTimer {
		for i, t := range timers {
			start := time.Now()
			for end := start.Add(min(slice, perTimer-spent[i])); ; {
				for range 64 {
					out[i] = append(out[i], int64(t.timed(work)))
				}
				if !time.Now().Before(end) {
					break
				}
			}
			spent[i] += time.Since(start)
		}
	}
	return out
}

// stats are the exact percentiles of a set of durations.
type stats struct {
	n                                  int
	min, p50, p90, p99, p999, max, avg time.Duration
}

func newStats(sorted []int64) stats {
	if len(sorted) == 0 {
		return stats{}
	}
	var sum float64
	for _, v := range sorted {
		sum += float64(v)
	}
	return stats{
		n:    len(sorted),
		min:  time.Duration(sorted[0]),
		p50:  percentile(sorted, 50),
		p90:  percentile(sorted, 90),
		p99:  percentile(sorted, 99),
		p999: percentile(sorted, 99.9),
		max:  time.Duration(sorted[len(sorted)-1]),
		avg:  time.Duration(sum / float64(len(sorted))),
	}
}

// percentile is the nearest-rank percentile p of sorted values.
func percentile(sorted []int64, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return time.Duration(sorted[min(max(rank, 1), len(sorted))-1])
}

// A bucket counts the durations in [lo, hi) (the last one includes hi).
type bucket struct {
	lo, hi time.Duration
	count  int
}

// tailRows is how many of a histogram's rows show the tail, above p99.
const tailRows = 4

// histogram puts sorted durations into at most rows buckets: the body of
// the distribution, from the minimum to the 99th percentile, in up to
// rows-tailRows buckets of equal width (never narrower than the clock's
// resolution as the samples show it, nor than 1% of the minimum, below
// which the clocks' own jitter is all a bucket would show), so that its
// shape shows; then the
// tail, from there to the maximum, in tailRows buckets whose widths grow
// geometrically, since it can span microseconds to milliseconds. Every
// duration is in exactly one bucket.
func histogram(sorted []int64, rows int) []bucket {
	if len(sorted) == 0 || rows <= tailRows {
		return nil
	}
	first, p99, last := sorted[0], int64(percentile(sorted, 99)), sorted[len(sorted)-1]
	body := int64(rows - tailRows)
	width := max((p99-first)/body+1, resolution(sorted[:sort.Search(len(sorted), func(i int) bool { return sorted[i] > p99 })]), first/100, 1)
	edges := []int64{first}
	for e := first + width; e <= p99; e += width {
		edges = append(edges, e)
	}
	edges = append(edges, edges[len(edges)-1]+width) // the body ends above p99
	from, to := float64(edges[len(edges)-1]), float64(last+1)
	for i := 1; i <= tailRows; i++ {
		e := int64(math.Round(from * math.Pow(max(to/from, 1), float64(i)/tailRows)))
		edges = append(edges, max(e, edges[len(edges)-1]+1))
	}
	if edges[len(edges)-1] <= last { // rounding
		edges[len(edges)-1] = last + 1
	}
	buckets := make([]bucket, len(edges)-1)
	j := 0
	for i := range buckets {
		buckets[i].lo, buckets[i].hi = time.Duration(edges[i]), time.Duration(edges[i+1])
		for j < len(sorted) && sorted[j] < edges[i+1] {
			buckets[i].count++
			j++
		}
	}
	return buckets
}

// resolution is the smallest step between two different sorted values:
// what the clock can tell apart, as far as these samples show.
func resolution(sorted []int64) int64 {
	step := int64(math.MaxInt64)
	for i := 1; i < len(sorted); i++ {
		if d := sorted[i] - sorted[i-1]; d > 0 {
			step = min(step, d)
		}
	}
	if step == math.MaxInt64 {
		return 1
	}
	return step
}

// printHistogram draws buckets as a bar chart, width characters for the
// fullest one.
func printHistogram(w io.Writer, buckets []bucket, total, width int) {
	most := 0
	for _, b := range buckets {
		most = max(most, b.count)
	}
	for _, b := range buckets {
		fmt.Fprintf(w, "  %9s .. %-9s %-*s %6.2f%% %9d\n", formatDuration(b.lo), formatDuration(b.hi),
			width, bar(b.count, most, width), 100*float64(b.count)/float64(max(total, 1)), b.count)
	}
}

// bar is a horizontal bar of count/most of width characters, in eighths.
func bar(count, most, width int) string {
	if most == 0 {
		return ""
	}
	eighths := int(math.Round(float64(count) / float64(most) * float64(width*8)))
	if count > 0 && eighths == 0 {
		eighths = 1 // a bucket that is not empty shows
	}
	partial := []string{"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"}
	return strings.Repeat("█", eighths/8) + partial[eighths%8]
}

// formatDuration prints d with three significant digits and no space
// before the unit ("1.5µs"), which keeps the histogram's columns narrow.
func formatDuration(d time.Duration) string {
	return strings.ReplaceAll(measure.Ns(float64(d)), " ", "")
}

func sortedCopy(v []int64) []int64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v
}
