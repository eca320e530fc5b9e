//go:build linux

package schedclock_test

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/internal/testenv"
	"github.com/schedclock/schedclock/internal/vdso"
)

// Where the kernel's vDSO time data is found, Coarse is never older than
// the kernel's own coarse clock, even for a goroutine that holds the only
// P, whom the ticker cannot interrupt: at each turn a spinner reads
// CLOCK_MONOTONIC_COARSE (kc), then Coarse (co), Now (n) and
// CLOCK_MONOTONIC (m). co was read after the kernel's update that kc
// comes from, or a later one, and that update was made at kc or after;
// so n-co is at most m-kc (the clock runs on CLOCK_MONOTONIC: Portable),
// however the OS schedules the spinner. Without the check (the ticker
// alone) a spinner at GOMAXPROCS=1 sees Coarse 10-40 ms old, against a
// kernel tick of 1-10 ms. It spins for 50 ms, a dozen kernel ticks at
// 250 Hz; the qualification layer, for 300 ms.
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
	spin := 50 * time.Millisecond
	if testenv.Qualifying() {
		spin = 300 * time.Millisecond
	}
	for start := time.Now(); time.Since(start) < spin; turns++ {
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
