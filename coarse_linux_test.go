//go:build linux

package schedclock_test

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/internal/vdso"
)

// coarseSpinEnv names, in a child process, the GOMAXPROCS at which it
// spins on Coarse.
const coarseSpinEnv = "SCHEDCLOCK_COARSE_SPIN"

// coarseSpinFor is how long a child spins on Coarse; coarseRefFor how
// long it measures the probe beside a loop in plain Go code, and beside
// a lean loop of Coarse and Now.
const (
	coarseSpinFor = 1500 * time.Millisecond
	coarseRefFor  = 500 * time.Millisecond
)

// TestCoarseSpinning measures what a goroutine that spins on the default
// clock's Coarse sees, from the process's first call, in a process of its
// own at GOMAXPROCS=2 (a P free for Coarse's ticker) and GOMAXPROCS=1
// (the spinner holds the only P until the Go scheduler preempts it): the
// staleness Now()-Coarse() at every turn of the loop. It bounds it by
// what it measures in the same process: how late a probe ticker of the
// same period runs beside the spinner (at GOMAXPROCS=1 the scheduler's
// preemption bound, at 2 the OS's wake-up latency for an idle P's
// thread). At GOMAXPROCS=1 that bound is the scheduler's only if the
// spinner can be preempted as often as any goroutine: so there the probe
// must run, beside a lean loop of Coarse and Now, at least half as often
// as beside a loop in plain Go code. A turn in which the spinner itself was stopped (by the OS,
// between its Coarse and its Now) reads as old as the stop was: that
// stop, the turn's own length, is not Coarse's and is taken off. The
// figures in docs/benchmarks.md (how old Coarse can be) come from here (go test -run
// TestCoarseSpinning -v).
func TestCoarseSpinning(t *testing.T) {
	if v := os.Getenv(coarseSpinEnv); v != "" {
		procs, err := strconv.Atoi(v)
		require.NoError(t, err)
		coarseSpinChild(t, procs)
		return
	}
	if testing.Short() {
		t.Skip("takes 6 s: make test runs it in its race target")
	}
	for _, procs := range []int{2, 1} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(t *testing.T) {
			for round := 1; ; round++ {
				out, err := runTestChild(t, coarseSpinEnv+"="+strconv.Itoa(procs), "-test.run=^TestCoarseSpinning$", "-test.count=1", "-test.v")
				t.Logf("child, round %d of at most %d:\n%s", round, coarseSpinRounds, out)
				if err != nil && round < coarseSpinRounds && onlyTooStale(out) {
					continue
				}
				require.NoError(t, err)
				assert.Contains(t, string(out), "--- PASS: TestCoarseSpinning")
				return
			}
		})
	}
}

// coarseSpinRounds is how many children TestCoarseSpinning runs at one
// GOMAXPROCS while the only assertion that fails is the staleness bound.
// That bound is what one probe ticker measured of the scheduler's
// lateness, a sample of what Coarse's own ticker meets; under an emulator
// on a busy machine a single stall of the ticker has been seen to outlast
// twice the probe's worst (qemu-loongarch64, beside the other packages'
// tests), so a miss is measured again in a new process; a Coarse that is
// not refreshed misses in every round.
const coarseSpinRounds = 3

// onlyTooStale reports whether the one assertion that failed in a
// coarseSpinChild's output is the staleness bound.
func onlyTooStale(out []byte) bool {
	return bytes.Count(out, []byte("Error Trace:")) == 1 && bytes.Contains(out, []byte(coarseTooStale))
}

// coarseTooStale is the message of coarseSpinChild's staleness bound.
const coarseTooStale = "staler than one resolution and the scheduler's lateness allow"

// spinHistogram counts staleness readings in 10 µs buckets up to 2 s.
type spinHistogram struct {
	n       int64
	buckets [200_000]int64
	max     time.Duration
}

func (h *spinHistogram) add(d time.Duration) {
	h.n++
	h.max = max(h.max, d)
	h.buckets[min(max(int(d/(10*time.Microsecond)), 0), len(h.buckets)-1)]++
}

// quantile is the upper edge of the bucket that holds the q-th reading.
func (h *spinHistogram) quantile(q float64) time.Duration {
	want := int64(q * float64(h.n-1))
	var seen int64
	for i, n := range h.buckets {
		if seen += n; seen > want {
			return min(time.Duration(i+1)*10*time.Microsecond, h.max)
		}
	}
	return h.max
}

func (h *spinHistogram) String() string {
	return fmt.Sprintf("p50 %v, p99 %v, p99.9 %v, max %v", h.quantile(0.5), h.quantile(0.99), h.quantile(0.999), h.max)
}

func coarseSpinChild(t *testing.T, procs int) {
	runtime.GOMAXPROCS(procs)
	const res = time.Millisecond // the default clock's resolution
	var probeLate, probeTicks atomic.Int64
	stop, probeDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(probeDone)
		tk := time.NewTicker(res)
		defer tk.Stop()
		next := time.Now().Add(res)
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				probeTicks.Add(1)
				if late := int64(time.Since(next)); late > probeLate.Load() {
					probeLate.Store(late)
				}
				next = time.Now().Add(res)
			}
		}
	}()
	// The reference, before the clock is first read: a loop in Go code,
	// with a call (a preemption point) every 16Ki turns.
	refEnd := time.Now().Add(coarseRefFor)
	x := uint64(1)
	for i := 0; ; i++ {
		x = x*6364136223846793005 + 1442695040888963407
		if i%(1<<14) == 0 && time.Now().After(refEnd) {
			break
		}
	}
	spinSink.Store(x)
	refLate, refTicks := time.Duration(probeLate.Swap(0)), probeTicks.Swap(0)
	raw, beyond := new(spinHistogram), new(spinHistogram)
	var ahead, firstMove int64
	first := schedclock.Coarse() // the process's first call
	begin := schedclock.Now()
	last := begin
	for {
		co := schedclock.Coarse()
		now := schedclock.Now()
		if co > now {
			ahead++
		}
		if firstMove == 0 && co != first {
			firstMove = int64(now - begin)
		}
		stale := time.Duration(now - co)
		raw.add(stale)
		beyond.add(stale - time.Duration(now-last)) // less the turn's own length
		last = now
		if now.Sub(begin) >= coarseSpinFor {
			break
		}
	}
	late, ticks := time.Duration(probeLate.Load()), probeTicks.Load()
	// Preemptible: a lean loop of Coarse and Now (nearly all its time in
	// Now's assembly on amd64) lets the probe run at least half as often
	// as the plain Go loop did.
	// Each loop calls its Coarse directly (a call through a func value is
	// a call whatever the inliner would do).
	probeTicks.Store(0)
	leanBegin := schedclock.Now()
	var sum schedclock.Instant
	for schedclock.Since(leanBegin) < coarseRefFor {
		sum += schedclock.Coarse()
	}
	leanTicks := probeTicks.Swap(0)
	d := schedclock.Default()
	for leanBegin = d.Now(); d.Since(leanBegin) < coarseRefFor; {
		sum += d.Coarse()
	}
	methodTicks := probeTicks.Load()
	spinSink.Store(uint64(sum))
	close(stop)
	<-probeDone
	t.Logf("GOMAXPROCS=%d, %d reads in %v from the first call: Now()-Coarse() %v; less each turn's own length %v; first move after %v; a probe ticker of %v ran %d times, at most %v late (beside a loop in plain Go code for %v before: %d times, %v late)",
		procs, raw.n, coarseSpinFor, raw, beyond, time.Duration(firstMove), res, ticks, late, coarseRefFor, refTicks, refLate)
	assert.Zero(t, ahead, "Coarse ahead of Now")
	assert.NotZero(t, firstMove, "Coarse never moved")
	t.Logf("a lean loop of Coarse and Now for %v: the probe ran %d times; of Clock.Coarse and Clock.Now: %d times", coarseRefFor, leanTicks, methodTicks)
	if procs == 1 { // with a P free the probe runs as the OS lets it, spinner or not
		assert.GreaterOrEqual(t, leanTicks, refTicks/2,
			"the spinner let the probe run less than half as often as a loop in plain Go code (it cannot be preempted)")
		assert.GreaterOrEqual(t, methodTicks, refTicks/2, "the same for Clock.Coarse")
	}
	// The OS's and the scheduler's lateness, as the probe saw it beside
	// both loops: a sample of what the ticker meets.
	lateness := max(late, refLate)
	assert.LessOrEqual(t, beyond.max, 2*res+2*lateness+2*time.Millisecond, coarseTooStale)
}

// spinSink keeps the reference loop's work.
var spinSink atomic.Uint64

// Where the kernel's vDSO time data is found, Coarse is never older than
// the kernel's own coarse clock, even for a goroutine that holds the only
// P, whom the ticker cannot interrupt: at each turn a spinner reads
// CLOCK_MONOTONIC_COARSE (kc), then Coarse (co), Now (n) and
// CLOCK_MONOTONIC (m). co was read after the kernel's update that kc
// comes from, or a later one, and that update was made at kc or after;
// so n-co is at most m-kc (the clock runs on CLOCK_MONOTONIC: Portable),
// however the OS schedules the spinner. Without the check (the ticker
// alone) a spinner at GOMAXPROCS=1 sees Coarse 10-40 ms old, against a
// kernel tick of 1-10 ms.
func TestCoarseNoOlderThanTheKernelsCoarseClock(t *testing.T) {
	c, err := schedclock.New(schedclock.Portable())
	require.NoError(t, err)
	defer c.Close()
	kcoarse, err := vdso.Open(vdso.MonotonicCoarse)
	require.NoError(t, err)
	mono, err := vdso.Open(vdso.Monotonic)
	require.NoError(t, err)
	if maps, err := os.ReadFile("/proc/self/maps"); err == nil && !strings.Contains(string(maps), "[vvar]") {
		t.Skip("no [vvar] mapping (qemu-user): no vDSO time data for Coarse to follow")
	}
	c.Coarse() // starts the ticker, which looks for the time data
	require.Eventually(t, c.CoarseFollowsTheKernel, 5*time.Second, time.Millisecond,
		"Coarse does not check the kernel's vDSO time data on this Linux machine (a time namespace?)")
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const slack = 20 * time.Microsecond // the clocks' conversions, rounding
	var turns, over int
	var worst, kernelWorst time.Duration
	for start := time.Now(); time.Since(start) < 300*time.Millisecond; turns++ {
		kc := kcoarse.Now()
		co := c.Coarse()
		n := c.Now()
		m := mono.Now()
		stale, bound := time.Duration(n-co), time.Duration(m-kc)
		worst, kernelWorst = max(worst, stale), max(kernelWorst, bound)
		if stale > bound+slack {
			over++
		}
	}
	t.Logf("%d turns at GOMAXPROCS=1: Coarse up to %v old, the kernel's coarse clock up to %v", turns, worst, kernelWorst)
	assert.Zero(t, over, "turns in which Coarse was older than the kernel's coarse clock (worst %v against %v)", worst, kernelWorst)
}
