//go:build linux

package warp

import (
	"fmt"
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/schedclock/schedclock/internal/osthread"
)

// Check checks that read never goes backwards from one CPU of the
// process's affinity mask to another (see warp.go for how), spending
// about budget on it, and converts the largest warp to nanoseconds at
// rate Hz (0: cycles only). It pins threads of its own, locked to their
// goroutines, and gives each its mask back before the runtime may use it
// for anything else (or lets it exit where that fails): no thread of the
// caller's is moved, none is left pinned.
//
// The mask is the calling thread's (sched_getaffinity of thread 0), which
// is the process's unless the caller restricted its own thread.
func Check(read func() uint64, rate uint64, budget time.Duration) Report {
	return checkOn(system{cpus: osthread.CPUs, pin: osthread.Pin}, read, rate, budget)
}

// minRound is the shortest run a round of pairs gets when a large
// machine divides the budget between many rounds (the kernel's 2 ms).
const minRound = 2 * time.Millisecond

// maxReads bounds each thread's reads in one pair, whatever the
// clock says: the deadline normally ends the loop first (each read waits
// for a cache line from the other CPU, a few tens to hundreds of ns).
const maxReads = 1 << 18

// deadlineEvery is how many reads pass between deadline checks.
const deadlineEvery = 64

// minFresh is how many fresh values from the other CPU each thread of
// a pair must see for the pair to count as checked: fewer means the two
// threads hardly ran at the same time (GOMAXPROCS=1, an overcommitted
// host) and a clean result would prove nothing.
const minFresh = 64

// stretch bounds how far a pair's run may stretch past its budget
// while its two threads have not yet run at the same time long enough to
// count (minFresh): on a busy machine a thread pinned to a CPU waits
// for its share of it. With the wait for the other thread to be pinned
// (at most the budget again), a batch of pairs takes at most
// (1 + stretch) × its budget, and usually the budget.
const stretch = 2

// system is what the check needs from the operating system: the CPUs it
// may use and a way to pin the calling thread to one of them. Tests
// replace it to force failures and to fake CPUs.
type system struct {
	cpus func() ([]int, error)
	// pin restricts the calling thread, locked to its goroutine, to cpu,
	// and returns how to give the thread its mask back.
	pin func(cpu int) (restore func() error, err error)
}

// slot is one thread's published value, alone in its cache line (128
// bytes: two 64-byte lines, for x86's adjacent-line prefetch and for
// arm64 parts with 128-byte lines) so that the only traffic between the
// two CPUs is the value itself.
type slot struct {
	_     [64]byte
	value atomic.Uint64
	_     [56]byte
}

// sideResult is one thread's result in a pair.
type sideResult struct {
	err    error  // pinning failed
	fresh  uint64 // reads compared with a new value from the other CPU
	warps  uint64
	before int
	cycles uint64 // largest warp seen
}

// checkOn runs the check with env. rate (Hz, may be 0) converts the
// warp to nanoseconds. budget is what the rounds take together, each
// round getting at least minRound: on two CPUs, one pair for the
// budget. A round may stretch to (1 + stretch) × its share where
// other work keeps the pinned threads from running together; each thread
// spins for at most stretch × its share.
func checkOn(env system, read func() uint64, rate uint64, budget time.Duration) Report {
	start := time.Now()
	finish := func(r Report) Report {
		r.Took = time.Since(start)
		return r
	}
	cpus, err := env.cpus()
	if err != nil {
		return finish(Report{Reason: fmt.Sprintf("reading the affinity mask: %v", err)})
	}
	switch {
	case len(cpus) == 0:
		return finish(Report{Reason: "the affinity mask is empty"})
	case len(cpus) == 1:
		return finish(Report{CPUs: 1, Reason: fmt.Sprintf("only CPU %d is allowed", cpus[0])})
	}
	procs := runtime.GOMAXPROCS(0)
	if procs < 2 {
		return finish(Report{CPUs: len(cpus), Reason: fmt.Sprintf("GOMAXPROCS=%d: no two threads run at once", procs)})
	}

	rounds := bits.Len(uint(len(cpus) - 1)) // ceil(log2 n)
	perRound := max(budget/time.Duration(rounds), minRound)
	// Pairs that run at once, two threads each, leaving one P to the
	// rest of the program: a pair whose second thread waits for a P that
	// the program's own goroutines hold sees no fresh values and proves
	// nothing (seen on an idle 16-CPU machine with every P given to
	// pinned threads).
	concurrent := max(1, (procs-1)/2)

	report := Report{Verdict: None, CPUs: len(cpus)}
	for r := 0; r < rounds; r++ {
		var pairs [][2]int
		for i := 0; i < 1<<r && i+1<<r < len(cpus); i++ {
			pairs = append(pairs, [2]int{cpus[i], cpus[i+1<<r]})
		}
		for len(pairs) > 0 {
			batch := pairs[:min(len(pairs), concurrent)]
			pairs = pairs[len(batch):]
			if failed, busy := runPairs(env, read, batch, perRound, &report); failed != "" {
				return finish(Report{CPUs: len(cpus), Reason: failed, Busy: busy})
			}
		}
	}
	if report.Warps > 0 {
		report.Verdict = Found
		if rate > 0 {
			report.Ns = float64(report.Cycles) / float64(rate) * 1e9
		}
	}
	return finish(report)
}

// runPairs runs a batch of disjoint pairs at once for about d (at
// most (1 + stretch) × d) and folds their results into report. When the
// batch proves nothing it leaves report alone and says why, and whether
// only a busy machine was to blame.
func runPairs(env system, read func() uint64, pairs [][2]int, d time.Duration, report *Report) (failed string, busy bool) {
	sides := make([][2]sideResult, len(pairs))
	done := make(chan struct{}, 2*len(pairs)) // a send from each side as it ends
	for p, pair := range pairs {
		lines := new([2]slot)
		var ready, satisfied atomic.Int32
		var abort atomic.Bool
		for s := 0; s < 2; s++ {
			go func() {
				defer func() { done <- struct{}{} }()
				runtime.LockOSThread()
				restore, err := env.pin(pair[s])
				if err != nil {
					abort.Store(true)
					sides[p][s].err = err
					if restore == nil || restore() != nil {
						return // exits locked: the runtime discards the thread
					}
					runtime.UnlockOSThread()
					return
				}
				sides[p][s] = pairSide(read, pair, s, &lines[s], &lines[1-s], &ready, &satisfied, &abort, d)
				// The thread goes back to the runtime's pool only with
				// the mask it had. Where that fails, the goroutine exits
				// still locked, and the runtime ends the thread rather
				// than let it run other goroutines on one CPU. Exiting
				// locked is not enough on its own: a goroutine that runs
				// on the main thread wedges it instead (the runtime
				// cannot end it), and the main thread's mask is the one
				// taskset -p shows for the process.
				if restore() != nil {
					return
				}
				runtime.UnlockOSThread()
			}()
		}
	}
	for range 2 * len(pairs) {
		<-done
	}

	for p, pair := range pairs {
		for s := 0; s < 2; s++ {
			if err := sides[p][s].err; err != nil {
				return fmt.Sprintf("pinning a thread to CPU %d: %v", pair[s], err), false
			}
		}
		for s := 0; s < 2; s++ {
			if fresh := sides[p][s].fresh; fresh < minFresh {
				return fmt.Sprintf("the threads on CPUs %d and %d hardly ran at the same time (%d fresh reads in %v)",
					pair[0], pair[1], fresh, stretch*d), true
			}
		}
	}
	for p, pair := range pairs {
		for s := 0; s < 2; s++ {
			side := sides[p][s]
			report.Reads += side.fresh
			report.Warps += side.warps
			if side.cycles > report.Cycles {
				report.Cycles, report.Before, report.After = side.cycles, side.before, pair[s]
			}
		}
		report.Pairs++
	}
	return "", false
}

// pairSide is one thread of a pair, already pinned to pair[s]: once
// the other thread is in place, it reads the counter, comparing each read
// with the other thread's last one and with its own previous one, and
// publishing each in mine. It stops after maxReads reads, or after d
// once both threads have seen minFresh fresh values (satisfied counts
// them), or after stretch × d whatever they saw.
func pairSide(read func() uint64, pair [2]int, s int, mine, theirs *slot,
	ready, satisfied *atomic.Int32, abort *atomic.Bool, d time.Duration) sideResult {
	var side sideResult
	ready.Add(1)
	// Both threads start the clock when both are in place: a thread
	// that waited for its CPU (busy with other work) still gets d.
	for wait := time.Now().Add(d); ready.Load() < 2; {
		if abort.Load() || time.Now().After(wait) {
			return side
		}
		runtime.Gosched()
	}
	start := time.Now()
	soft, hard := start.Add(d), start.Add(stretch*d)

	var prev, lastSeen uint64
	counted := false
	for i := 0; i < maxReads; i++ {
		other := theirs.value.Load()
		now := read()
		if other != lastSeen {
			side.fresh++
			lastSeen = other
		}
		if other > now {
			side.warps++
			if w := other - now; w > side.cycles {
				side.cycles, side.before = w, pair[1-s]
			}
		}
		if prev > now {
			side.warps++
			if w := prev - now; w > side.cycles {
				side.cycles, side.before = w, pair[s]
			}
		}
		mine.value.Store(now)
		prev = now
		if i%deadlineEvery == 0 {
			if !counted && side.fresh >= minFresh {
				counted = true
				satisfied.Add(1)
			}
			if t := time.Now(); abort.Load() || t.After(hard) || t.After(soft) && satisfied.Load() == 2 {
				break
			}
		}
	}
	return side
}
