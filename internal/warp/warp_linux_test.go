//go:build linux

package warp

import (
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/schedclock/schedclock/internal/osthread"
)

// warpSanityLimit bounds how long any check in these tests may take: far
// above the budget, it only catches a loop that the deadline and the read
// count failed to end (timings themselves belong in benchmarks).
const warpSanityLimit = time.Second

// needTwoCPUs skips the test unless the process may run on two CPUs at
// once, and returns the allowed CPUs.
func needTwoCPUs(t *testing.T) []int {
	t.Helper()
	cpus, err := osthread.CPUs()
	require.NoError(t, err)
	if len(cpus) < 2 || runtime.GOMAXPROCS(0) < 2 {
		t.Skipf("needs two CPUs and GOMAXPROCS >= 2; have CPUs %v, GOMAXPROCS %d", cpus, runtime.GOMAXPROCS(0))
	}
	return cpus
}

// runWarpCheck runs check once: two threads pinned to two CPUs must run
// at the same time, which a busy machine may not give them for the
// check's budget. Where it did not (the check says so: Busy), t skips
// with the check's own reason, a precondition of the machine and not a
// failure of the check; a test never tries again.
func runWarpCheck(t *testing.T, check func() Report) Report {
	t.Helper()
	r := check()
	if r.Busy {
		assert.Contains(t, r.Reason, "hardly ran at the same time")
		t.Skipf("the machine was too busy for two pinned threads to run at once: %s", r)
	}
	return r
}

// assertSaneReport checks what every report must satisfy, whatever it found.
func assertSaneReport(t *testing.T, r Report, cpus []int) {
	t.Helper()
	assert.Less(t, r.Took, warpSanityLimit, "the check must be bounded")
	assert.NotEmpty(t, r.String())
	switch r.Verdict {
	case None:
		assert.Equal(t, len(cpus), r.CPUs)
		assert.Equal(t, len(cpus)-1, r.Pairs, "one reference CPU for every CPU but the first")
		assert.GreaterOrEqual(t, r.Reads, uint64(2*minFresh*r.Pairs))
		assert.Zero(t, r.Warps)
	case Found:
		assert.NotZero(t, r.Warps)
		assert.NotZero(t, r.Cycles)
		assert.Contains(t, cpus, r.Before)
		assert.Contains(t, cpus, r.After)
	default:
		assert.NotEmpty(t, r.Reason)
	}
}

// TestWarpCheckCatchesAPerCPUOffset fakes a counter that runs 1 ms ahead
// on one CPU, the CPU being whichever the reading thread is on (getcpu):
// the check must see it, name both CPUs in the right order, and size it.
func TestWarpCheckCatchesAPerCPUOffset(t *testing.T) {
	cpus := needTwoCPUs(t)
	const offset = 1_000_000 // 1 ms at 1 GHz
	ahead := cpus[1]
	read := func() uint64 {
		if osthread.CurrentCPU() == ahead {
			return readMono() + offset
		}
		return readMono()
	}
	r := runWarpCheck(t, func() Report { return Check(read, 1_000_000_000, DefaultBudget) })
	t.Logf("%s", r)
	assertSaneReport(t, r, cpus)
	require.Equal(t, Found, r.Verdict, "%s", r)
	assert.Equal(t, ahead, r.Before, "the earlier, higher read was on the CPU that is ahead")
	// The CPU behind it is its partner in whichever pair showed the
	// largest warp: cpus[0] on two CPUs, any of the others on more.
	assert.Contains(t, cpus, r.After)
	assert.NotEqual(t, ahead, r.After)
	// The warp is the offset less the time the value took to travel.
	assert.LessOrEqual(t, r.Cycles, uint64(offset))
	assert.Greater(t, r.Cycles, uint64(offset/2))
	assert.InDelta(t, float64(r.Cycles), r.Ns, 1, "1 GHz: one cycle is one ns")
	assert.Contains(t, r.String(), "CPU "+strconv.Itoa(ahead))
	assert.Contains(t, r.String(), " µs")
}

// TestWarpCheckPairsEveryCPUOnce fakes five CPUs, told apart by thread
// id, with the fourth 1 ms behind: four pairs in three rounds, and the
// warp is found on the pair that links CPU 3 to its reference, CPU 1.
// The fake CPUs are pinned to real ones in turn, so that the two threads
// of a pair really run at once.
func TestWarpCheckPairsEveryCPUOnce(t *testing.T) {
	real := needTwoCPUs(t)
	// One pair at a time: the five fake CPUs share two real ones, and
	// two pairs at once would pin two threads to each.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	var threadCPU sync.Map // thread id -> fake CPU
	var pinnedMu sync.Mutex
	var pinned []int
	env := system{
		cpus: func() ([]int, error) { return []int{0, 1, 2, 3, 4}, nil },
		pin: func(cpu int) (func() error, error) {
			pinnedMu.Lock()
			realCPU := real[len(pinned)%2]
			pinned = append(pinned, cpu)
			pinnedMu.Unlock()
			restore, err := osthread.Pin(realCPU)
			threadCPU.Store(unix.Gettid(), cpu)
			return func() error { threadCPU.Delete(unix.Gettid()); return restore() }, err
		},
	}
	const behind = 3
	read := func() uint64 {
		now := readMono() + 10_000_000
		if cpu, _ := threadCPU.Load(unix.Gettid()); cpu == behind {
			return now - 1_000_000
		}
		return now
	}
	r := runWarpCheck(t, func() Report {
		pinnedMu.Lock()
		pinned = nil
		pinnedMu.Unlock()
		return checkOn(env, read, 0, 8*time.Millisecond)
	})
	t.Logf("%s", r)
	require.Equal(t, Found, r.Verdict, "%s", r)
	assert.Equal(t, 5, r.CPUs)
	assert.Equal(t, 4, r.Pairs)
	assert.ElementsMatch(t, []int{0, 1, 0, 2, 1, 3, 0, 4}, pinned, "pairs (0,1), (0,2), (1,3), (0,4)")
	assert.Equal(t, behind, r.After)
	assert.Equal(t, 1, r.Before, "CPU 3's reference is CPU 1")
	assert.Zero(t, r.Ns, "no rate, no ns")
	assert.NotContains(t, r.String(), "cycles (", "no rate, no duration in the text")
}

func TestWarpCheckOneAllowedCPU(t *testing.T) {
	cpus, err := osthread.CPUs()
	require.NoError(t, err)
	done := make(chan Report)
	go func() {
		runtime.LockOSThread()
		restore, err := osthread.Pin(cpus[0])
		if err != nil {
			done <- Report{Reason: "test: " + err.Error()}
			return
		}
		r := Check(readMono, 1_000_000_000, DefaultBudget)
		after, err := osthread.CPUs()
		if err != nil || len(after) != 1 {
			r.Reason += " (test: the caller's mask changed)"
		}
		if restore() == nil {
			runtime.UnlockOSThread()
		}
		done <- r
	}()
	r := <-done
	t.Logf("%s", r)
	assert.Equal(t, Unchecked, r.Verdict)
	assert.False(t, r.Busy)
	assert.False(t, r.Never, "a mask may change: the check may run later")
	assert.Equal(t, "only CPU "+strconv.Itoa(cpus[0])+" is allowed", r.Reason)
	assert.Equal(t, "cross-CPU check not run: only CPU "+strconv.Itoa(cpus[0])+" is allowed", r.String())
}

func TestWarpCheckCannotPin(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs GOMAXPROCS >= 2")
	}
	env := system{
		cpus: func() ([]int, error) { return []int{0, 1}, nil },
		pin: func(cpu int) (func() error, error) {
			restore := func() error { return nil }
			if cpu == 1 {
				return restore, unix.EPERM
			}
			return restore, nil
		},
	}
	r := checkOn(env, readMono, 1_000_000_000, DefaultBudget)
	assert.Equal(t, Unchecked, r.Verdict)
	assert.Equal(t, "pinning a thread to CPU 1: operation not permitted", r.Reason)
	assert.False(t, r.Busy, "another try would fail the same way")
	assert.Less(t, r.Took, warpSanityLimit)

	env.cpus = func() ([]int, error) { return nil, unix.ENOSYS }
	r = checkOn(env, readMono, 0, DefaultBudget)
	assert.Equal(t, Unchecked, r.Verdict)
	assert.Contains(t, r.Reason, "reading the affinity mask")
}

func TestWarpCheckNeedsTwoProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	env := system{
		cpus: func() ([]int, error) { return []int{0, 1}, nil },
		pin: func(int) (func() error, error) {
			t.Error("pinned with GOMAXPROCS=1")
			return func() error { return nil }, nil
		},
	}
	r := checkOn(env, readMono, 0, DefaultBudget)
	assert.Equal(t, Unchecked, r.Verdict)
	assert.Contains(t, r.Reason, "GOMAXPROCS=1")
}

// TestWarpCheckBusy fakes a CPU so busy that the thread pinned to it
// only runs after the other gave up: the check says so, and that another
// try is worth it.
func TestWarpCheckBusy(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs GOMAXPROCS >= 2")
	}
	const budget = 2 * time.Millisecond
	env := system{
		cpus: func() ([]int, error) { return []int{0, 1}, nil },
		pin: func(cpu int) (func() error, error) {
			if cpu == 1 {
				time.Sleep(4 * budget)
			}
			return func() error { return nil }, nil
		},
	}
	r := checkOn(env, readMono, 0, budget)
	assert.Equal(t, Unchecked, r.Verdict)
	assert.True(t, r.Busy)
	assert.Contains(t, r.Reason, "the threads on CPUs 0 and 1 hardly ran at the same time")
}
