package main

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The handoff check: two goroutines, each locked to its own thread and
// (on Linux) pinned to its own CPU, each in a loop:
//
//	seq := other.seq.Load(); p := other.value.Load()   // what the other published
//	r := read()                                        // then read the clock
//	if seq is new: one handoff; r < p is a backward step
//	mine.value.Store(r); mine.seq.Store(mine.seq+1)     // publish
//
// p was read before it was stored, stored before it was loaded, and
// loaded before r was read, so in happens-before order r comes after p:
// a clock that is monotonic in that order never gives r < p. Only loads
// that see a new sequence number count, so every handoff crosses
// threads, and a coarse clock that publishes the same value twice is
// still checked at full rate.

// slot is one goroutine's publication, alone on its cache lines.
type slot struct {
	_     [64]byte
	value atomic.Int64
	seq   atomic.Uint64
	_     [64]byte
}

type handoffResult struct {
	handoffs  int64         // checks made
	backwards int64         // readings below the value handed over
	maxStep   int64         // the largest such step, ns
	elapsed   time.Duration // of the whole check
	timedOut  bool          // stopped by the time limit before handoffs checks
	pinErr    error         // why the threads are not pinned, if they are not
}

// checkHandoffs runs the check until n handoffs were checked (about half
// on each side) or limit has passed.
func checkHandoffs(read func() int64, n int64, cpus [2]int, limit time.Duration) handoffResult {
	var (
		slots    [2]slot
		finished atomic.Int32 // goroutines that made their share of checks
		stop     atomic.Bool  // the time limit passed
		results  [2]handoffResult
		pinErrs  [2]error
		wg       sync.WaitGroup
	)
	share := [2]int64{n - n/2, n / 2}
	start := time.Now()
	timer := time.AfterFunc(limit, func() { stop.Store(true) })
	defer timer.Stop()
	for me := range 2 {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			pinErrs[me] = pinThread(cpus[me])
			mine, other := &slots[me], &slots[1-me]
			var lastSeq, mySeq uint64
			res := &results[me]
			done := share[me] == 0
			if done {
				finished.Add(1)
			}
			for i := 0; ; i++ {
				seq := other.seq.Load()
				handed := other.value.Load()
				r := read()
				if seq != lastSeq {
					lastSeq = seq
					if !done {
						res.handoffs++
						if r < handed {
							res.backwards++
							res.maxStep = max(res.maxStep, handed-r)
						}
						if res.handoffs == share[me] {
							done = true
							finished.Add(1)
						}
					}
				}
				mine.value.Store(r)
				mySeq++
				mine.seq.Store(mySeq)
				// Stop only when both are done, so that neither waits
				// for publications that no longer come.
				if i&1023 == 0 && (finished.Load() == 2 || stop.Load()) {
					return
				}
			}
		})
	}
	wg.Wait()
	out := handoffResult{elapsed: time.Since(start), timedOut: finished.Load() < 2}
	for _, r := range results {
		out.handoffs += r.handoffs
		out.backwards += r.backwards
		out.maxStep = max(out.maxStep, r.maxStep)
	}
	for _, err := range pinErrs {
		if err != nil {
			out.pinErr = err
		}
	}
	return out
}
