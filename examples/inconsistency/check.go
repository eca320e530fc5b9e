package main

import (
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// result is what the readers found, summed.
type result struct {
	goroutines int
	elapsed    time.Duration
	reads      int64
	// own counts readings below the same goroutine's previous one; cross
	// those below the shared mark but not below the goroutine's own
	// previous reading: a step back only another goroutine could show.
	own, cross int64
	largest    int64    // the largest step back, ns
	examples   []string // the first inversions each goroutine saw
}

func (r result) inversions() int64 { return r.own + r.cross }

// reader is one goroutine's share, padded so that the goroutines' counts
// do not share a cache line.
type reader struct {
	reads, own, cross, largest int64
	examples                   []string
	_                          [64]byte
}

func (rd *reader) note(g int, what string, now, before int64) {
	if len(rd.examples) < 3 {
		rd.examples = append(rd.examples, fmt.Sprintf("goroutine %d: read %d after %s %d: %d ns back", g, now, what, before, before-now))
	}
}

// check reads the clocks that clockFor gives each of goroutines readers,
// back to back, for duration (and at least minReads readings each), and
// compares every reading with the goroutine's previous one and with the
// shared high-water mark loaded before the read.
//
// The mark holds the largest reading any goroutine has returned. A
// reading that returned before another read began is at most the mark
// that read loads, so a reading below the mark it loaded went back in
// happens-before order, whichever goroutine, thread or CPU took either.
// Unlike the kernel's inconsistency-check, which compares readings only
// within a batch of 64, no pair of consecutive readings escapes.
func check(clockFor func(goroutine int) func() int64, goroutines int, duration time.Duration, minReads int64) result {
	var (
		mark    atomic.Int64
		stop    atomic.Bool
		wg      sync.WaitGroup
		readers = make([]reader, goroutines)
	)
	mark.Store(math.MinInt64)
	start := time.Now()
	for g := range readers {
		wg.Add(1)
		go func(g int, rd *reader, now func() int64) {
			defer wg.Done()
			prev := int64(math.MinInt64)
			for ; !stop.Load() || rd.reads < minReads; rd.reads++ {
				floor := mark.Load()
				t := now()
				switch {
				case t < prev:
					rd.own++
					rd.note(g, "its own", t, prev)
				case t < floor:
					rd.cross++
					rd.note(g, "another goroutine's", t, floor)
				}
				if t < max(prev, floor) {
					rd.largest = max(rd.largest, max(prev, floor)-t)
				}
				prev = t
				for cur := floor; t > cur && !mark.CompareAndSwap(cur, t); cur = mark.Load() {
				}
			}
		}(g, &readers[g], clockFor(g))
	}
	time.Sleep(duration)
	stop.Store(true)
	wg.Wait()

	res := result{goroutines: goroutines, elapsed: time.Since(start)}
	for _, rd := range readers {
		res.reads += rd.reads
		res.own += rd.own
		res.cross += rd.cross
		res.largest = max(res.largest, rd.largest)
		res.examples = append(res.examples, rd.examples...)
	}
	return res
}

func (r result) print(out io.Writer) {
	if r.inversions() == 0 {
		fmt.Fprintln(out, "[OK]")
	} else {
		fmt.Fprintln(out, "[FAILED]")
		for _, e := range r.examples {
			fmt.Fprintln(out, "  "+e)
		}
	}
	fmt.Fprintf(out, "reads %d (%.1f M/s over %v), inversions %d (%d within a goroutine, %d across goroutines), largest step back %d ns\n",
		r.reads, float64(r.reads)/r.elapsed.Seconds()/1e6, r.elapsed.Round(time.Millisecond), r.inversions(), r.own, r.cross, r.largest)
}
