// Command latency times a real workload with schedclock.Now and with
// time.Now, side by side, and shows what each clock costs per call and
// the latency distribution each one sees: percentiles and a bar chart.
//
//	go run ./examples/latency                      # sha256 of 1 KiB, 1 s per clock
//	go run ./examples/latency -workload json -duration 3s
//
// Workloads: sha256 (of 1 KiB), json (json.Marshal of a log record), map
// (map inserts, lookups and deletes).
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"
)

func main() {
	duration := flag.Duration("duration", time.Second, "how long to time the workload with each clock")
	name := flag.String("workload", "sha256", "what to time: sha256, json or map")
	rows := flag.Int("rows", 14, "rows of the histogram (the last 4 are the tail above p99)")
	flag.Parse()
	w, err := findWorkload(*name)
	if err != nil || *duration <= 0 || *rows <= tailRows {
		if err == nil {
			err = fmt.Errorf("-duration must be positive and -rows more than %d", tailRows)
		}
		fmt.Fprintln(os.Stderr, "latency:", err)
		os.Exit(2)
	}
	run(os.Stdout, w, *duration, *rows)
}

// result is what one clock saw.
type result struct {
	timer    timer
	overhead float64 // ns per call
	sorted   []int64
	stats    stats
	buckets  []bucket
}

// experiment runs the whole experiment: the clocks' own cost, then the
// workload timed with each clock.
func experiment(w workload, perTimer time.Duration, rows int) (results []result, gcs uint32) {
	n := calibrateCalls(min(50*time.Millisecond, perTimer/4))
	for _, t := range timers {
		results = append(results, result{timer: t, overhead: overhead(t.loop, n)})
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	samples := sample(w.setup(), perTimer, min(50*time.Millisecond, perTimer/4))
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(workSink) // the work's and the loops' results are used
	runtime.KeepAlive(loopSink)
	for i := range results {
		results[i].sorted = sortedCopy(samples[i])
		results[i].stats = newStats(results[i].sorted)
		results[i].buckets = histogram(results[i].sorted, rows)
	}
	return results, after.NumGC - before.NumGC
}
