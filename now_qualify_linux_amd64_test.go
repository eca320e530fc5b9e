//go:build gc && !purego

package schedclock

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/testcounter"
	"github.com/schedclock/schedclock/internal/testenv"
	"github.com/schedclock/schedclock/internal/warp"
)

// handoffEnv sets how many cross-CPU reads TestTSCHandoff takes of each
// reader (default 200,000; docs/benchmarks.md's figure is from 6e6).
const handoffEnv = "SCHEDCLOCK_HANDOFF_READS"

// TestTSCHandoff hands the TSC between CPUs with the cross-CPU warp
// check (internal/warp: two threads pinned to two CPUs, each reading
// after loading the other's last value), for the clock's own read
// (LFENCE; RDTSC) and for a bare RDTSC, and logs how many reads went
// backwards and by how much: on a machine whose TSCs are in step, the
// fenced read never does, and whatever the bare one shows is its own
// reordering, not skew. A measurement of the machine (the qualification
// layer's): it requires only that the reads were taken.
//
//	SCHEDCLOCK_QUALIFY=1 SCHEDCLOCK_HANDOFF_READS=6e6 go test -run TestTSCHandoff -v .
func TestTSCHandoff(t *testing.T) {
	testenv.Qualify(t)
	want := uint64(200_000)
	if s := os.Getenv(handoffEnv); s != "" {
		n, err := strconv.ParseFloat(s, 64)
		require.NoError(t, err, "%s=%q", handoffEnv, s)
		want = uint64(n)
	}
	rate := uint64(0)
	if hw, _, _, err := probeTSC(); err == nil {
		rate = hw.Rate
	}
	for _, r := range []struct {
		name string
		read func() uint64
	}{{"LFENCE; RDTSC", tscReader()}, {"RDTSC", testcounter.ReadUnfenced}} {
		var reads, warps, worst uint64
		start := time.Now()
		for reads < want && time.Since(start) < 5*time.Minute {
			rep := warp.Check(r.read, rate, 100*time.Millisecond)
			if rep.Verdict == warp.Unchecked {
				if rep.Never || !rep.Busy {
					t.Skipf("the cross-CPU check cannot run here: %s", rep.Reason)
				}
				continue
			}
			reads += rep.Reads
			warps += rep.Warps
			worst = max(worst, rep.Cycles)
		}
		ns := 0.0
		if rate != 0 {
			ns = float64(worst) * 1e9 / float64(rate)
		}
		t.Logf("%s: %d of %d cross-CPU reads went backwards, by at most %d cycles (%.0f ns), in %v", r.name, warps, reads, worst, ns, time.Since(start).Round(time.Millisecond))
		require.GreaterOrEqual(t, reads, want, "%s: reads taken in 5 minutes", r.name)
	}
}
