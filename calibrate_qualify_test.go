package schedclock_test

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/internal/testenv"
)

// The watch's qualification runs: a refused jump and correct narrow
// counters watched for seconds of real time, beside CPU-bound processes.
// calibrate_test.go has the same behaviours in testing/synctest bubbles.

// TestWatchRefusesAJumpFarForward is the judged run of a refused jump: a
// watched 1 GHz counter jumps 3 s ahead (10 s with SCHEDCLOCK_LONG=1,
// make stress) within a watch period of 100 ms (a migration without TSC
// scaling) and stays there, while 4
// goroutines read the clock. Readers that read the counter before the
// watch saw the jump read it; the watch refuses it (it is not time),
// and no reading may be below one already returned, in any goroutine
// or across them: the clock stands still at the highest value a reader
// may have read, for as long as the lead refused at most (plus the
// watch's look), with Info saying so, and from one watch period after
// the reference's timeline caught up it advances at the reference's
// pace, 1.00 ± 0.01. About 6 s of real time (14 s): the qualification
// layer.
func TestWatchRefusesAJumpFarForward(t *testing.T) {
	testenv.Qualify(t)
	w := newWildCounter(1e9)
	ref := monoRef()
	c, err := schedclock.New(w.source(1e9), schedclock.WithReference(ref))
	require.NoError(t, err)
	defer c.Close()
	time.Sleep(300 * time.Millisecond)
	before := offset(c, ref)
	type reading struct {
		ref int64
		now schedclock.Instant
	}
	var (
		done     atomic.Bool
		wg       sync.WaitGroup
		highest  atomic.Int64 // the highest reading any reader returned so far
		backs    atomic.Int64
		readings [4][]reading
	)
	for i := range readings {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !done.Load() {
				seen := highest.Load() // returned before this Now began
				now := c.Now()
				if int64(now) < seen {
					backs.Add(1)
				}
				for h := highest.Load(); int64(now) > h && !highest.CompareAndSwap(h, int64(now)); h = highest.Load() {
				}
				readings[i] = append(readings[i], reading{ref(), now})
				time.Sleep(time.Millisecond)
			}
		}()
	}
	jump := 3 * time.Second
	if os.Getenv("SCHEDCLOCK_LONG") != "" {
		jump = 10 * time.Second
	}
	w.change(float64(jump), 1e9)
	var holding schedclock.Info
	require.Eventually(t, func() bool { holding = c.Info(); return holding.Watch.Holding }, 5*time.Second, time.Millisecond,
		"Info never said the clock stands still: %+v", c.Info().Watch)
	time.Sleep(jump + 2*time.Second)
	done.Store(true)
	wg.Wait()
	in := c.Info()
	t.Logf("while holding: %+v", holding.Watch)
	t.Logf("after: %+v", in.Watch)
	assert.Zero(t, backs.Load(), "readings below one already returned")
	// Each reader's stand-still: its longest run of equal readings, at
	// held; the reference's timeline caught up with held at caughtUp.
	held, caughtUp := int64(0), int64(math.MaxInt64)
	for i, rs := range readings {
		from, longest := 0, time.Duration(0)
		for j := 1; j < len(rs); j++ {
			require.GreaterOrEqual(t, rs[j].now, rs[j-1].now, "reader %d went back", i)
			if rs[j].now != rs[from].now {
				from = j
			} else if d := time.Duration(rs[j].ref - rs[from].ref); d > longest {
				longest, held = d, int64(rs[j].now)
			}
		}
		t.Logf("reader %d: %d readings, stood still %v at %v", i, len(rs), longest, time.Duration(held))
		assert.InDelta(t, float64(jump), float64(longest), float64(time.Second), "reader %d stood still %v", i, longest)
	}
	for _, r := range readings[0] {
		if r.ref+int64(before) >= held {
			caughtUp = r.ref
			break
		}
	}
	rs := readings[0]
	last := rs[len(rs)-1]
	require.Less(t, caughtUp+int64(schedclock.WatchPeriod), last.ref-int64(time.Second), "the reference's timeline caught up too late to measure its pace")
	for _, r := range rs {
		if r.ref >= caughtUp+int64(schedclock.WatchPeriod) {
			pace := float64(last.now-r.now) / float64(last.ref-r.ref)
			t.Logf("pace from %v after the timeline caught up, over %v: %.5f", schedclock.WatchPeriod, time.Duration(last.ref-r.ref), pace)
			assert.InDelta(t, 1, pace, 0.01)
			break
		}
	}
	assert.InDelta(t, float64(before), float64(offset(c, ref)), float64(time.Millisecond), "back on the reference's timeline")
	assert.GreaterOrEqual(t, in.Watch.Reanchors, 1)
	assert.Equal(t, 1, in.Watch.CounterFaults, in.Watch.LastCounterFault)
	assert.InDelta(t, float64(jump), float64(holding.Watch.StandStill), float64(time.Second), "the stand-still Info announced")
	assert.False(t, in.Watch.Holding)
	assert.InDelta(t, float64(jump), float64(in.Watch.StandStill), float64(time.Second), "the stand-still Info reported after")
}

// cpuHogEnv makes the test binary a CPU-bound process (see TestMain),
// which spins until it is killed.
const cpuHogEnv = "SCHEDCLOCK_CPU_HOG"

func cpuHog() {
	for {
		hogSink++
	}
}

// hogSink is what a CPU hog computes.
var hogSink uint64

// startCPUHogs starts n CPU-bound processes (the test binary as
// cpuHog), killed at the test's end.
func startCPUHogs(t *testing.T, n int) {
	t.Helper()
	for range n {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), cpuHogEnv+"=1")
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
}

// narrowRun is one run of a correct narrow counter watched against a
// reference that counts the same time: a bits-wide counter at hz,
// computed exactly from the runtime's monotonic clock, read every 10 ms
// for 4 s. With exitOnce, the reference calls runtime.Goexit once, 1 s
// in (the clock's background goroutine, which calls it, exits). It
// returns the steps back (how many, the deepest), where the clock ended
// against its reference (less where it started) and Info at the end.
func narrowRun(t *testing.T, bits int, hz uint64, exitOnce bool) (back int, deepest, end time.Duration, in schedclock.Info) {
	t.Helper()
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	mask := uint64(1)<<bits - 1
	read := func() uint64 {
		ns := uint64(now())
		return (ns/1e9*hz + ns%1e9*hz/1e9) & mask
	}
	var armed, fired atomic.Bool
	ref := func() int64 {
		if armed.Load() && fired.CompareAndSwap(false, true) {
			runtime.Goexit()
		}
		return now()
	}
	c, err := schedclock.New(schedclock.Source{Name: fmt.Sprintf("%d bits", bits), Bits: bits, Rate: hz, Read: read}, schedclock.WithReference(ref))
	require.NoError(t, err)
	defer c.Close()
	from := offset(c, now)
	last := c.Now()
	for i := range 400 {
		if exitOnce && i == 100 {
			armed.Store(true)
		}
		time.Sleep(10 * time.Millisecond)
		if v := c.Now(); v < last {
			back++
			deepest = max(deepest, time.Duration(last-v))
		} else {
			last = v
		}
	}
	if exitOnce {
		require.True(t, fired.Load(), "the reference never exited")
	}
	return back, deepest, offset(c, now) - from, c.Info()
}

// TestNarrowCountersBesideCPUHogs is the judged run of correct narrow
// counters (16 bits at 65536 Hz, which wraps every second, and 20 bits
// at 1 MHz), each watched against a reference that agrees, beside two
// CPU-bound processes: one run of 4 s of each counter, and one with a
// reference that calls runtime.Goexit once, the four at once; with
// SCHEDCLOCK_LONG=1 (make stress), 20 runs and 5, one after another. No
// step back, no counter fault, no
// re-anchoring, and the clock within 1 ms of its reference at the end.
func TestNarrowCountersBesideCPUHogs(t *testing.T) {
	testenv.Qualify(t)
	long := os.Getenv("SCHEDCLOCK_LONG") != ""
	startCPUHogs(t, 2)
	for _, tc := range []struct {
		bits     int
		hz       uint64
		exitOnce bool
		runs     int
	}{{16, 65536, false, 20}, {20, 1_000_000, false, 20}, {16, 65536, true, 5}, {20, 1_000_000, true, 5}} {
		if !long {
			tc.runs = 1
		}
		name := fmt.Sprintf("%d bits at %d Hz", tc.bits, tc.hz)
		if tc.exitOnce {
			name += ", the reference exits once"
		}
		t.Run(name, func(t *testing.T) {
			if !long {
				t.Parallel()
			}
			backs, worstEnd := 0, time.Duration(0)
			for run := range tc.runs {
				back, deepest, end, in := narrowRun(t, tc.bits, tc.hz, tc.exitOnce)
				backs += back
				worstEnd = max(worstEnd, end, -end)
				t.Logf("run %2d: %d back (deepest %v), %d counter faults, %d re-anchorings, %d faults, ended %v from the reference; rate %d Hz (%s, ±%.3f ppm)",
					run, back, deepest, in.Watch.CounterFaults, in.Watch.Reanchors, in.Faults, end, in.Rate, in.RateOrigin, in.RateErrorPPM)
				assert.Zero(t, back, "run %d: Now stepped back, by up to %v", run, deepest)
				assert.Zero(t, in.Watch.CounterFaults, "run %d: %s", run, in.Watch.LastCounterFault)
				assert.Zero(t, in.Watch.Reanchors, "run %d: %s", run, in.Watch.LastReanchor)
				assert.InDelta(t, 0, float64(end), float64(time.Millisecond), "run %d: ended %v from the reference", run, end)
				if tc.exitOnce {
					assert.Contains(t, in.LastFault, "Goexit", "run %d", run)
				}
			}
			t.Logf("%d runs: %d steps back, worst end %v", tc.runs, backs, worstEnd)
		})
	}
}
