//go:build linux

package schedclock

import (
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// checkWarp checks that read never goes backwards from one CPU of the
// process's affinity mask to another (see warp.go for how), spending
// about budget on it, and converts the largest warp to nanoseconds at
// rate Hz (0: cycles only). It pins threads of its own, locked to their
// goroutines, and gives each its mask back before the runtime may use it
// for anything else (or lets it exit where that fails): no thread of the
// caller's is moved, none is left pinned.
//
// The mask is the calling thread's (sched_getaffinity of thread 0), which
// is the process's unless the caller restricted its own thread.
func checkWarp(read func() uint64, rate uint64, budget time.Duration) warpReport {
	return checkWarpOn(warpEnv{cpus: allowedCPUs, pin: pinThread}, read, rate, budget)
}

// allowedCPUs lists the CPUs in the calling thread's affinity mask, in
// ascending order.
func allowedCPUs() ([]int, error) {
	set, size, err := threadMask()
	if err != nil {
		return nil, err
	}
	var cpus []int
	for cpu := 0; cpu < size; cpu++ {
		if set.IsSet(cpu) {
			cpus = append(cpus, cpu)
		}
	}
	return cpus, nil
}

// threadMask returns the calling thread's affinity mask and how many CPUs
// it can name. It asks for 1024 CPUs first and doubles while the kernel
// says EINVAL (its own mask is larger), as glibc's sched_getaffinity does.
func threadMask() (set unix.CPUSetDynamic, size int, err error) {
	for size = 1024; ; size *= 2 {
		set = unix.NewCPUSet(size)
		err = unix.SchedGetaffinityDynamic(0, set)
		if err == nil || !errors.Is(err, unix.EINVAL) || size >= 1<<20 {
			return set, size, err
		}
	}
}

// pinThread restricts the calling thread to cpu and returns how to give
// it back the mask it had. The caller must have locked its goroutine to
// the thread; the kernel moves the thread before sched_setaffinity
// returns.
func pinThread(cpu int) (restore func() error, err error) {
	saved, _, err := threadMask()
	if err != nil {
		return nil, err
	}
	restore = func() error { return unix.SchedSetaffinityDynamic(0, saved) }
	set := unix.NewCPUSet(cpu + 1)
	set.Set(cpu)
	return restore, unix.SchedSetaffinityDynamic(0, set)
}

// warpMinRound is the shortest run a round of pairs gets when a large
// machine divides the budget between many rounds (the kernel's 2 ms).
const warpMinRound = 2 * time.Millisecond

// warpMaxReads bounds each thread's reads in one pair, whatever the
// clock says: the deadline normally ends the loop first (each read waits
// for a cache line from the other CPU, a few tens to hundreds of ns).
const warpMaxReads = 1 << 18

// warpDeadlineEvery is how many reads pass between deadline checks.
const warpDeadlineEvery = 64

// warpMinFresh is how many fresh values from the other CPU each thread of
// a pair must see for the pair to count as checked: fewer means the two
// threads hardly ran at the same time (GOMAXPROCS=1, an overcommitted
// host) and a clean result would prove nothing.
const warpMinFresh = 64

// warpStretch bounds how far a pair's run may stretch past its budget
// while its two threads have not yet run at the same time long enough to
// count (warpMinFresh): on a busy machine a thread pinned to a CPU waits
// for its share of it. With the wait for the other thread to be pinned
// (at most the budget again), a batch of pairs takes at most
// (1 + warpStretch) × its budget, and usually the budget.
const warpStretch = 2

// warpEnv is what the check needs from the operating system: the CPUs it
// may use and a way to pin the calling thread to one of them. Tests
// replace it to force failures and to fake CPUs.
type warpEnv struct {
	cpus func() ([]int, error)
	// pin restricts the calling thread, locked to its goroutine, to cpu,
	// and returns how to give the thread its mask back.
	pin func(cpu int) (restore func() error, err error)
}

// warpLine is one thread's published value, alone in its cache line (128
// bytes: two 64-byte lines, for x86's adjacent-line prefetch and for
// arm64 parts with 128-byte lines) so that the only traffic between the
// two CPUs is the value itself.
type warpLine struct {
	_     [64]byte
	value atomic.Uint64
	_     [56]byte
}

// warpSide is one thread's result in a pair.
type warpSide struct {
	err    error  // pinning failed
	fresh  uint64 // reads compared with a new value from the other CPU
	warps  uint64
	before int
	cycles uint64 // largest warp seen
}

// checkWarpOn runs the check with env. rate (Hz, may be 0) converts the
// warp to nanoseconds. budget is what the rounds take together, each
// round getting at least warpMinRound: on two CPUs, one pair for the
// budget. A round may stretch to (1 + warpStretch) × its share where
// other work keeps the pinned threads from running together; each thread
// spins for at most warpStretch × its share.
func checkWarpOn(env warpEnv, read func() uint64, rate uint64, budget time.Duration) warpReport {
	start := time.Now()
	finish := func(r warpReport) warpReport {
		r.Took = time.Since(start)
		return r
	}
	cpus, err := env.cpus()
	if err != nil {
		return finish(warpReport{Reason: fmt.Sprintf("reading the affinity mask: %v", err)})
	}
	switch {
	case len(cpus) == 0:
		return finish(warpReport{Reason: "the affinity mask is empty"})
	case len(cpus) == 1:
		return finish(warpReport{CPUs: 1, Reason: fmt.Sprintf("only CPU %d is allowed", cpus[0])})
	}
	procs := runtime.GOMAXPROCS(0)
	if procs < 2 {
		return finish(warpReport{CPUs: len(cpus), Reason: fmt.Sprintf("GOMAXPROCS=%d: no two threads run at once", procs)})
	}

	rounds := bits.Len(uint(len(cpus) - 1)) // ceil(log2 n)
	perRound := max(budget/time.Duration(rounds), warpMinRound)
	concurrent := procs / 2 // pairs that can run at once, two threads each

	report := warpReport{Verdict: warpNone, CPUs: len(cpus)}
	for r := 0; r < rounds; r++ {
		var pairs [][2]int
		for i := 0; i < 1<<r && i+1<<r < len(cpus); i++ {
			pairs = append(pairs, [2]int{cpus[i], cpus[i+1<<r]})
		}
		for len(pairs) > 0 {
			batch := pairs[:min(len(pairs), concurrent)]
			pairs = pairs[len(batch):]
			if failed, busy := runWarpPairs(env, read, batch, perRound, &report); failed != "" {
				return finish(warpReport{CPUs: len(cpus), Reason: failed, Busy: busy})
			}
		}
	}
	if report.Warps > 0 {
		report.Verdict = warpFound
		if rate > 0 {
			report.Ns = float64(report.Cycles) / float64(rate) * 1e9
		}
	}
	return finish(report)
}

// runWarpPairs runs a batch of disjoint pairs at once for about d (at
// most (1 + warpStretch) × d) and folds their results into report. When the
// batch proves nothing it leaves report alone and says why, and whether
// only a busy machine was to blame.
func runWarpPairs(env warpEnv, read func() uint64, pairs [][2]int, d time.Duration, report *warpReport) (failed string, busy bool) {
	sides := make([][2]warpSide, len(pairs))
	var wg sync.WaitGroup
	for p, pair := range pairs {
		lines := new([2]warpLine)
		var ready, satisfied atomic.Int32
		var abort atomic.Bool
		for s := 0; s < 2; s++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
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
				sides[p][s] = warpPairSide(read, pair, s, &lines[s], &lines[1-s], &ready, &satisfied, &abort, d)
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
	wg.Wait()

	for p, pair := range pairs {
		for s := 0; s < 2; s++ {
			if err := sides[p][s].err; err != nil {
				return fmt.Sprintf("pinning a thread to CPU %d: %v", pair[s], err), false
			}
		}
		for s := 0; s < 2; s++ {
			if fresh := sides[p][s].fresh; fresh < warpMinFresh {
				return fmt.Sprintf("the threads on CPUs %d and %d hardly ran at the same time (%d fresh reads in %v)",
					pair[0], pair[1], fresh, warpStretch*d), true
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

// warpPairSide is one thread of a pair, already pinned to pair[s]: once
// the other thread is in place, it reads the counter, comparing each read
// with the other thread's last one and with its own previous one, and
// publishing each in mine. It stops after warpMaxReads reads, or after d
// once both threads have seen warpMinFresh fresh values (satisfied counts
// them), or after warpStretch × d whatever they saw.
func warpPairSide(read func() uint64, pair [2]int, s int, mine, theirs *warpLine,
	ready, satisfied *atomic.Int32, abort *atomic.Bool, d time.Duration) warpSide {
	var side warpSide
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
	soft, hard := start.Add(d), start.Add(warpStretch*d)

	var prev, lastSeen uint64
	counted := false
	for i := 0; i < warpMaxReads; i++ {
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
		if i%warpDeadlineEvery == 0 {
			if !counted && side.fresh >= warpMinFresh {
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
