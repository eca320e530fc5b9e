//go:build linux

package schedclock_test

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/internal/testenv"
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
// as beside a loop in plain Go code. A turn in which the spinner itself
// was stopped (by the OS, between its Coarse and its Now) reads as old as
// the stop was: that stop, the turn's own length, is not Coarse's and is
// taken off. The probe is a sample of the lateness Coarse's own ticker
// meets, not the same wake-ups: one stall of the ticker can outlast the
// probe's worst, so the bound holds for 99% of the turns (a Coarse that
// stops being refreshed misses it for nearly all of them), and the worst
// turn is logged. The qualification layer's: it takes 6 s of a machine's
// real scheduling. The figures in the package doc ("Coarse time") come
// from here (SCHEDCLOCK_QUALIFY=1 go test -run TestCoarseSpinning -v).
func TestCoarseSpinning(t *testing.T) {
	if v := os.Getenv(coarseSpinEnv); v != "" {
		procs, err := strconv.Atoi(v)
		require.NoError(t, err)
		coarseSpinChild(t, procs)
		return
	}
	testenv.Qualify(t)
	for _, procs := range []int{2, 1} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(t *testing.T) {
			out, err := runTestChild(t, coarseSpinEnv+"="+strconv.Itoa(procs), "-test.run=^TestCoarseSpinning$", "-test.count=1", "-test.v")
			t.Logf("child:\n%s", out)
			require.NoError(t, err)
			assert.Contains(t, string(out), "--- PASS: TestCoarseSpinning")
		})
	}
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
	assert.LessOrEqual(t, beyond.quantile(0.99), 2*res+2*lateness+2*time.Millisecond, coarseTooStale)
}

// spinSink keeps the reference loop's work.
var spinSink atomic.Uint64
