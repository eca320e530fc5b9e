// Command coarsespin measures how old schedclock.Coarse is as seen by a
// goroutine that spins on it from the process's first call: at every turn
// of its loop, Now()-Coarse(). It prints the distribution of those
// readings. Run it as a fresh process at the GOMAXPROCS to measure:
//
//	GOMAXPROCS=2 go run ./examples/coarsespin -for 3s
//	GOMAXPROCS=1 go run ./examples/coarsespin -for 3s
//
// With a P free, Coarse's ticker clears the value every resolution (1 ms)
// and the spinner refreshes it: within about one resolution plus how late
// the ticker's thread wakes. On one P the ticker runs only when the Go
// scheduler preempts the spinner (it does after 10 ms running, seen at
// most 10 ms late): within that time slice.
package main

import (
	"flag"
	"fmt"
	"runtime"
	"time"

	"github.com/schedclock/schedclock"
)

func main() {
	spinFor := flag.Duration("for", 3*time.Second, "how long to spin")
	flag.Parse()
	const bucket = 10 * time.Microsecond
	counts := make([]int64, 200_000) // 10 µs buckets up to 2 s
	var n int64
	var worst, firstMove time.Duration
	first := schedclock.Coarse() // the process's first call
	begin := schedclock.Now()
	for {
		co := schedclock.Coarse()
		now := schedclock.Now()
		if firstMove == 0 && co != first {
			firstMove = now.Sub(begin)
		}
		stale := now.Sub(co)
		worst = max(worst, stale)
		counts[min(int(stale/bucket), len(counts)-1)]++
		n++
		if now.Sub(begin) >= *spinFor {
			break
		}
	}
	quantile := func(q float64) time.Duration {
		want, seen := int64(q*float64(n-1)), int64(0)
		for i, c := range counts {
			if seen += c; seen > want {
				return min(time.Duration(i+1)*bucket, worst)
			}
		}
		return worst
	}
	fmt.Printf("GOMAXPROCS=%d, %d reads in %v from the first call; Now()-Coarse(): p50 %v, p99 %v, p99.9 %v, max %v; first move after %v\n",
		runtime.GOMAXPROCS(0), n, *spinFor, quantile(0.5), quantile(0.99), quantile(0.999), worst, firstMove)
}
