package schedclock

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/schedclock/schedclock/internal/cpu"
	"github.com/schedclock/schedclock/internal/race"
	"github.com/schedclock/schedclock/internal/testenv"
)

// TestStressNowUnderSIGPROF runs the stress suite's oracle
// (now_internal_test.go) on every clock stressCases makes, at GOMAXPROCS
// 1 and all CPUs, with the profiler and per-thread timers flooding the
// readers and the writer with SIGPROF: no reading steps back or goes
// unexplained. The qualification layer's: it needs the machine's real
// counters and signals, for seconds (make stress runs 10^9 readings).
func TestStressNowUnderSIGPROF(t *testing.T) {
	testenv.Qualify(t)
	total := stressTotalReads(t)
	threadHz := stressProfileHz
	if race.Enabled || cpu.Emulated() {
		// Each signal's handler is many times slower too.
		threadHz /= 10
	}
	if cpu.Emulated() {
		t.Logf("under user-mode emulation (the host's /proc/cpuinfo shows through): %d readings, SIGPROF at %d Hz", total, threadHz)
	}
	stopProfile := stressProfile(t)
	start := time.Now()
	cases := stressCases(t)
	procs := []int{1, runtime.NumCPU()}
	reads := (total + len(procs)*len(cases) - 1) / (len(procs) * len(cases))
	for _, p := range procs {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", p), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(p))
			for _, sc := range cases {
				sc.sigprofHz = threadHz
				t.Run(sc.name, func(t *testing.T) {
					stressRun(t, sc, sc.clock.nanos, reads).assertClean(t, sc.name, reads)
				})
			}
		})
	}
	if samples := stopProfile(); samples >= 0 {
		elapsed := time.Since(start)
		t.Logf("SIGPROF: %d profile samples in %v (%.0f a second; the profiler at %d Hz and a timer at %d Hz on each reader's and the writer's thread)",
			samples, elapsed.Round(time.Millisecond), float64(samples)/elapsed.Seconds(), stressProfileHz, threadHz)
		assert.Positive(t, samples, "no SIGPROF reached the profiler")
	}
}
