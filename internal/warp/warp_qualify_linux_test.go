//go:build linux

package warp

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/schedclock/schedclock/internal/testcounter"
	"github.com/schedclock/schedclock/internal/testenv"
)

// TestWarpCheckRealCounters runs the check on the counters themselves:
// Go's monotonic clock, which the kernel keeps in step across CPUs, must
// show no warp; the hardware counter (read serialized) says what it
// says on this machine. The real counters across real CPUs: the
// qualification layer's.
func TestWarpCheckRealCounters(t *testing.T) {
	testenv.Qualify(t)
	cpus := needTwoCPUs(t)
	counters := []struct {
		name string
		read func() uint64
		// mustAgree: the kernel guarantees this counter across CPUs.
		mustAgree bool
	}{
		{"portable", readMono, true},
		{"hardware", testcounter.ReadSerialized, false},
	}
	for _, counter := range counters {
		t.Run(counter.name, func(t *testing.T) {
			if counter.name == "hardware" && !testcounter.Supported {
				t.Skip("no hardware counter reader in this build")
			}
			rate := uint64(1_000_000_000)
			if counter.name != "portable" {
				rate = roughRate(counter.read)
			}
			r := runWarpCheck(t, func() Report { return Check(counter.read, rate, DefaultBudget) })
			t.Logf("%s at %d Hz on CPUs %v: %s (took %v)", counter.name, rate, cpus, r, r.Took)
			assertSaneReport(t, r, cpus)
			require.NotEqual(t, Unchecked, r.Verdict, "with two CPUs the check must run: %s", r.Reason)
			if counter.mustAgree {
				assert.Equal(t, None, r.Verdict, "%s", r)
			}
		})
	}
}

// roughRate measures read's rate against Go's monotonic clock over 10 ms:
// enough to write a warp in ns.
func roughRate(read func() uint64) uint64 {
	c0, t0 := read(), time.Now()
	time.Sleep(10 * time.Millisecond)
	c1, elapsed := read(), time.Since(t0)
	return uint64(float64(c1-c0) / elapsed.Seconds())
}

// TestWarpCheckLeavesNoPinnedThread proves the pinned threads are gone
// after a check: no thread of the process is left with a narrower mask
// than the process's. It waits (up to 2 s) for the kernel to end the
// threads: the qualification layer's.
func TestWarpCheckLeavesNoPinnedThread(t *testing.T) {
	testenv.Qualify(t)
	cpus := needTwoCPUs(t)
	r := runWarpCheck(t, func() Report { return Check(readMono, 1_000_000_000, DefaultBudget) })
	require.Equal(t, None, r.Verdict, "%s", r)

	narrowed := func() (tids []int) {
		entries, err := os.ReadDir("/proc/self/task")
		require.NoError(t, err)
		for _, e := range entries {
			tid, err := strconv.Atoi(e.Name())
			require.NoError(t, err)
			set := unix.NewCPUSet(1024)
			if err := unix.SchedGetaffinityDynamic(tid, set); err != nil {
				continue // the thread exited meanwhile
			}
			if set.Count() < len(cpus) {
				tids = append(tids, tid)
			}
		}
		return tids
	}
	// A locked goroutine's thread exits just after the goroutine does,
	// which is after Check has been told the goroutine is done.
	deadline := time.Now().Add(2 * time.Second)
	for len(narrowed()) > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	assert.Empty(t, narrowed(), "threads left pinned after the check")
}
