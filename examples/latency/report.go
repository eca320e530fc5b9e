package main

import (
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/schedclock/schedclock"
)

// run times w with each clock (see experiment) and writes the report to
// out: what a reading of each clock costs, then each clock's percentiles
// and histogram.
func run(out io.Writer, w workload, perTimer time.Duration, rows int) []result {
	in := schedclock.Default().Info()
	fmt.Fprintf(out, "Timing %q (%s) for %v with each clock, alternating every %v.\n",
		w.name, w.what, perTimer, min(50*time.Millisecond, perTimer/4))
	fmt.Fprintf(out, "%s %s/%s, GOMAXPROCS %d; schedclock's default clock reads %s", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), in.Source)
	if in.Evidence.Rejected != "" {
		fmt.Fprintf(out, " (hardware counter not used: %s)", in.Evidence.Rejected)
	}
	fmt.Fprintln(out)

	results, gcs := experiment(w, perTimer, rows)

	fmt.Fprintln(out, "\nWhat one reading of each clock costs (a loop of calls, less the same loop empty):")
	for _, r := range results {
		fmt.Fprintf(out, "  %-15s %6.1f ns per call, %6.1f ns per timed call (two readings)\n",
			r.timer.name, r.overhead, 2*r.overhead)
	}

	for _, r := range results {
		s := r.stats
		fmt.Fprintf(out, "\nTimed with %s: %d calls, mean %s\n", r.timer.name, s.n, formatDuration(s.avg))
		fmt.Fprintf(out, "  min %s   p50 %s   p90 %s   p99 %s   p99.9 %s   max %s\n",
			formatDuration(s.min), formatDuration(s.p50), formatDuration(s.p90),
			formatDuration(s.p99), formatDuration(s.p999), formatDuration(s.max))
		printHistogram(out, r.buckets, s.n, 40)
	}

	fmt.Fprintf(out, "\nBuckets are [from, to). Each duration includes about one reading of the clock\n")
	fmt.Fprintf(out, "that timed it. The last %d rows are the tail above p99, where preemption,\n", tailRows)
	fmt.Fprintf(out, "interrupts and the garbage collector (%d cycles during the run) show.\n", gcs)
	if len(results) == 2 && results[0].stats.n > 0 && results[1].stats.n > 0 {
		a, b := results[0], results[1]
		fmt.Fprintf(out, "Median as timed by %s: %s; by %s: %s (%+.1f%%).\n",
			a.timer.name, formatDuration(a.stats.p50), b.timer.name, formatDuration(b.stats.p50),
			100*(float64(a.stats.p50)/float64(b.stats.p50)-1))
	}
	fmt.Fprintln(out, "Try -workload json or -workload map, and -duration 5s for steadier tails.")
	return results
}
