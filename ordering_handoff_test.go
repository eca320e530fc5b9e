package schedclock

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/schedclock/schedclock/internal/osthread"
	"github.com/schedclock/schedclock/internal/testcounter"
)

// Part of the ordering suite (ordering_test.go, which says which sources
// it proves): the cross-CPU handoff of TestCrossCPUOrdering, the kernel's
// check_tsc_warp, on threads pinned to two CPUs.

// testCPUs returns two CPUs this process may run on. When there is only
// one, or threads cannot be pinned here, it says so with t.Log and
// returns false: the threads then share what there is, unpinned or on
// that CPU.
func testCPUs(t *testing.T) (cpus [2]int, two bool) {
	if !osthread.Supported {
		t.Logf("threads cannot be pinned to CPUs on %s: they run unpinned, and cross-CPU reordering is not asserted", runtime.GOOS)
		return [2]int{-1, -1}, false
	}
	allowed, err := osthread.CPUs()
	if err != nil {
		t.Logf("cannot read the CPU affinity (%v): threads are not pinned, and cross-CPU reordering is not shown", err)
		return [2]int{-1, -1}, false
	}
	if len(allowed) < 2 {
		t.Logf("only CPU %d is available: both threads share it, so cross-CPU reordering is not shown, only interleavings", allowed[0])
		return [2]int{allowed[0], allowed[0]}, false
	}
	return [2]int{allowed[0], allowed[1]}, true
}

// lockToCPU locks the calling goroutine to its thread and that thread to
// cpu (when cpu >= 0), and returns how to give the thread its mask back:
// the goroutine must defer it and exit without unlocking. The runtime
// then ends the thread, except the main thread, which it keeps: pinned,
// that one would pin every goroutine later scheduled on it.
func lockToCPU(t *testing.T, cpu int) (unpin func()) {
	runtime.LockOSThread()
	if cpu < 0 {
		return func() {}
	}
	restore, err := osthread.Pin(cpu)
	if restore == nil {
		t.Errorf("reading a thread's CPU mask: %v", err)
		return func() {}
	}
	if err != nil {
		t.Errorf("pinning a thread to CPU %d: %v", cpu, err)
	}
	return func() { _ = restore() }
}

// atLeastTwoPs raises GOMAXPROCS to 2 for the duration of a test, so that
// two locked threads can spin at once.
func atLeastTwoPs(t *testing.T) {
	if prev := runtime.GOMAXPROCS(0); prev < 2 {
		runtime.GOMAXPROCS(2)
		t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	}
}

// handoffWarp runs the handoff loop with read on cpus[0] and cpus[1]
// until one thread has received handoffs/2 values, or the threads
// together have seen stopAt inversions (0: never stop early). Readings
// must stay below 2^63: the low bit of the shared value names the thread
// that stored it.
func handoffWarp(t *testing.T, read func() uint64, cpus [2]int, handoffs, stopAt uint64) warpResult {
	// Two threads sharing one CPU hand over only when the scheduler
	// switches them: waiting ones yield it.
	shared := cpus[0] == cpus[1]
	atLeastTwoPs(t)
	var (
		last       atomic.Uint64
		stop       atomic.Bool
		inversions atomic.Uint64
		results    [2]warpResult
		wg         sync.WaitGroup
	)
	for id := range uint64(2) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer lockToCPU(t, cpus[id])()
			r := &results[id]
			for !stop.Load() {
				prev := last.Load()
				now := read()
				if prev&1 == id {
					if shared {
						osthread.Yield()
					}
					continue // our own value: the other thread has not answered yet
				}
				last.Store(now<<1 | id)
				if prev == 0 {
					continue // the start (0 counts as thread 0's): thread 1 begins
				}
				r.handoffs++
				if now < prev>>1 {
					r.inversions++
					r.maxBack = max(r.maxBack, prev>>1-now)
					if stopAt > 0 && inversions.Add(1) >= stopAt {
						stop.Store(true)
					}
				}
				if r.handoffs >= handoffs/2 {
					stop.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	return warpResult{
		handoffs:   results[0].handoffs + results[1].handoffs,
		inversions: results[0].inversions + results[1].inversions,
		maxBack:    max(results[0].maxBack, results[1].maxBack),
	}
}

// counterOffset bounds the difference between the hardware counter on
// cpus[1] and on cpus[0] by ping-pong with serialized reads: cpus[0]
// reads t1, signals, cpus[1] reads v and answers, cpus[0] reads t3. The
// offset lies in (v-t3, v-t1) for every round trip; the tightest bounds
// are returned. lo > 0 or hi < 0 proves the counters disagree.
func counterOffset(t *testing.T, cpus [2]int, rounds int) (lo, hi int64) {
	atLeastTwoPs(t)
	var ping, pongSeq, pongVal atomic.Uint64
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer lockToCPU(t, cpus[1])()
		for k := uint64(1); k <= uint64(rounds); k++ {
			for ping.Load() != k {
			}
			pongVal.Store(testcounter.ReadSerialized())
			pongSeq.Store(k)
		}
	}()
	lo, hi = math.MinInt64, math.MaxInt64
	go func() {
		defer wg.Done()
		defer lockToCPU(t, cpus[0])()
		for k := uint64(1); k <= uint64(rounds); k++ {
			t1 := testcounter.ReadSerialized()
			ping.Store(k)
			for pongSeq.Load() != k {
			}
			v := pongVal.Load()
			t3 := testcounter.ReadSerialized()
			lo = max(lo, int64(v-t3))
			hi = min(hi, int64(v-t1))
		}
	}()
	wg.Wait()
	return lo, hi
}
