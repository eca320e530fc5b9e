package schedclock

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/kernel"
	"github.com/schedclock/schedclock/internal/osthread"
	"github.com/schedclock/schedclock/internal/warp"
)

// The default clock's trust policy (trust.go): the kernel's verdict for
// life, the cross-CPU check, the evidence a counter is adopted on, and
// the fall-back, each on a clock built as the default clock is.

// TestKernelVerdictForLife checks that the default clock leaves the
// hardware counter for the portable source when the kernel stops
// trusting it, says why, and stops tracking it.
func TestKernelVerdictForLife(t *testing.T) {
	hw := realtime1GHz()
	hw.Rate = 1e9
	c, err := newClock(hw, rating{hz: 1e9, origin: rateCPUID}, &tracker{ref: rawNow, src: hw, adopted: true, endsOnRegister: true})
	require.NoError(t, err)
	var demoted atomic.Bool
	c.st.policy = &trustPolicy{}
	c.st.policy.verdict = func() string {
		if demoted.Load() {
			return "hw: the kernel's clocksource changed to hpet"
		}
		return ""
	}
	c.start()
	defer c.Close()
	time.Sleep(20 * time.Millisecond)
	require.Equal(t, "hw", c.Info().Source)
	before := c.nanos()
	demoted.Store(true)
	c.st.mu.Lock()
	c.st.policy.verdictDue = time.Now()
	c.unlock()
	c.kick()
	require.Eventually(t, func() bool { return c.Info().Source == "portable" }, 2*time.Second, time.Millisecond)
	assert.Contains(t, c.Info().Evidence.Rejected, "hpet")
	assert.GreaterOrEqual(t, c.nanos(), before)
	c.st.mu.Lock()
	assert.Nil(t, c.st.track)
	assert.Nil(t, c.st.policy.verdict)
	c.unlock()
}

// needTwoCPUs skips the test unless the process may run on two CPUs at
// once, and returns the allowed CPUs.
func needTwoCPUs(t *testing.T) []int {
	t.Helper()
	cpus, err := osthread.CPUs()
	if err != nil || len(cpus) < 2 || runtime.GOMAXPROCS(0) < 2 {
		t.Skipf("needs two CPUs and GOMAXPROCS >= 2; have CPUs %v (%v), GOMAXPROCS %d", cpus, err, runtime.GOMAXPROCS(0))
	}
	return cpus
}

// TestWarpUntrusted: a warp is an error wrapping errUntrusted that says
// what the check found; anything else is no error.
func TestWarpUntrusted(t *testing.T) {
	found := warp.Report{Verdict: warp.Found, CPUs: 8, Pairs: 7, Reads: 5000, Warps: 3,
		Before: 4, After: 0, Cycles: 3_000_000, Ns: 1_000_000, Took: 21 * time.Millisecond}
	err := warpUntrusted(found, "tsc")
	assert.ErrorIs(t, err, errUntrusted)
	assert.EqualError(t, err, "schedclock: counter not trusted \"tsc\": cross-CPU warp: a read on CPU 0 was 3000000 cycles (1 ms) "+
		"behind an earlier read on CPU 4; 3 of 5000 cross-CPU reads went backwards (8 CPUs, 7 pairs, 21ms)")
	assert.NoError(t, warpUntrusted(warp.Report{Verdict: warp.None, CPUs: 2, Pairs: 1}, "tsc"))
	assert.NoError(t, warpUntrusted(warp.Report{Reason: "only CPU 0 is allowed"}, "tsc"))
}

// BenchmarkCheckWarp measures how long the default clock's cross-CPU
// check (internal/warp) takes with the default budget, on the TSC where this build has it, else on the
// portable source: `go test -run '^$' -bench CheckWarp -benchtime 20x`.
func BenchmarkCheckWarp(b *testing.B) {
	cpus, err := osthread.CPUs()
	if err != nil || len(cpus) < 2 {
		b.Skip("needs two CPUs")
	}
	read, name := readMono, "portable"
	if tsc := tscReader(); tsc != nil {
		read, name = tsc, "tsc"
	}
	unchecked := 0
	var reads uint64
	for i := 0; i < b.N; i++ {
		r := warp.Check(read, 0, warp.DefaultBudget)
		if r.Verdict == warp.Unchecked {
			unchecked++
		}
		if r.Verdict == warp.Found {
			b.Fatalf("%s: %s", name, r)
		}
		reads += r.Reads
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/check")
	b.ReportMetric(float64(reads)/float64(b.N), "reads/check")
	b.ReportMetric(float64(unchecked), "unchecked")
}

// TestASuspendedClockSleeps: a suspended clock neither watches nor polls
// the kernel's verdict, and a verdict that fell due while it was
// suspended must not make its next tick one in the past (the goroutine
// would spin until Resume).
func TestASuspendedClockSleeps(t *testing.T) {
	var jump atomic.Int64
	c, _ := fakeTimeClock(t, 2.1e9, &jump)
	defer c.Close()
	polls := 0
	// The verdict is installed once the clock is suspended: installed
	// before, the clock's own goroutine could poll it in a tick before
	// Suspend (it did under qemu-riscv64: "Should be zero, but was 1").
	require.NoError(t, c.Suspend())
	now := time.Now()
	c.st.mu.Lock()
	c.st.policy = &trustPolicy{verdict: func() string { polls++; return "" }}
	c.st.policy.verdictDue = now.Add(-time.Second) // fell due while suspended
	c.unlock()
	next := c.tick(now)
	assert.False(t, next.Before(now.Add(time.Second)), "a suspended clock's next tick is %v from now", next.Sub(now))
	assert.Zero(t, polls, "the verdict was polled while suspended")
	require.NoError(t, c.Resume())
}

// TestPendingTrustDoesNotSpin: while the default clock's checks of a
// counter whose rate it measures are still running (a cross-CPU check
// retried for up to 93 s), the measurement waits for them instead of
// waking every 20 ms, and runs as soon as they end.
func TestPendingTrustDoesNotSpin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		fake := func() int64 { return int64(time.Since(start)) }
		hw := Source{Name: "hw", Bits: 64, Read: func() uint64 { return uint64(fake()) }}
		c, err := newClock(Portable(), rating{hz: 1e9, origin: rateDeclared}, &tracker{ref: fake, witness: fake, src: hw, endsOnRegister: true})
		require.NoError(t, err)
		c.st.policy = &trustPolicy{trustPending: true}
		c.start()
		defer c.Close()
		bubbleSleep(10 * time.Second)
		c.st.mu.Lock()
		wakes := c.st.loop.wakes
		c.unlock()
		t.Logf("%d wake-ups in 10 s with the trust checks pending", wakes)
		assert.LessOrEqual(t, wakes, 6)
		assert.Equal(t, "portable", c.Info().Source)
		c.st.mu.Lock()
		c.trustSettledLocked(time.Now())
		c.unlock()
		bubbleSleep(time.Millisecond)
		synctest.Wait()
		assert.Equal(t, "hw", c.Info().Source, "the counter was not adopted once its checks ended")
	})
}

// TestTheTSCIsTrustedOnlyOnEvidence builds the default clock as package
// initialisation does, on a TSC whose rate CPUID gives, under each
// kernel verdict: only the kernel's word that it runs on the TSC puts the
// clock on it at once; where the verdict cannot be read (sysfs hidden or
// missing, an empty file, a directory in its place) or names another
// clocksource, the clock starts on the portable source, Kernel says what
// was read, Rejected why, and Pending what the trust waits for.
func TestTheTSCIsTrustedOnlyOnEvidence(t *testing.T) {
	base := time.Now()
	tsc := Source{Name: "tsc", Bits: 64, Rate: 1e9, Read: func() uint64 { return uint64(time.Since(base)) }}
	probe := func() (Source, rateOrigin, float64, error) {
		return tsc, rateCPUID, 0, nil
	}
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(p, 0o755))
		p = filepath.Join(p, "current_clocksource")
		if content == "dir" {
			require.NoError(t, os.Mkdir(p, 0o755))
		} else {
			require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		}
		return p
	}
	for _, tc := range []struct {
		name, path, kernel string
		trusted            bool
	}{
		{"no sysfs", filepath.Join(dir, "hidden", "current_clocksource"), "kernel clocksource unknown", false},
		{"empty", file("empty", ""), "kernel clocksource is empty", false},
		{"a directory", file("directory", "dir"), "kernel clocksource unknown", false},
		{"kvm-clock", file("kvm", "kvm-clock\n"), "kernel clocksource is kvm-clock, not tsc", false},
		{"tsc", file("tsc", "tsc\n"), "kernel clocksource is tsc", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newChosenDefaultClock([]*descriptor{{Arch: runtime.GOARCH, Probe: probe,
				Verdict: func() kernel.Verdict { return kernel.ReadVerdict(tc.path, "tsc") }}})
			defer func() {
				require.NoError(t, c.Close()) // unused: its checks never start
			}()
			in := *c.st.info.Load() // the snapshot, without the first use that Info makes
			assert.Contains(t, in.Evidence.Kernel, tc.kernel)
			if tc.trusted {
				assert.Equal(t, "tsc", in.Source)
				assert.Empty(t, in.Evidence.Rejected)
				assert.Empty(t, in.Evidence.Pending)
				return
			}
			assert.Equal(t, "portable", in.Source, "trusted on CPUID alone")
			assert.Contains(t, in.Evidence.Rejected, "tsc: not trusted yet: "+tc.kernel)
			assert.Equal(t, "the cross-CPU check", in.Evidence.Pending)
			c.st.mu.Lock()
			assert.True(t, c.st.policy.trustPending, "the measured rate would be adopted before any check")
			c.unlock()
		})
	}
}

// TestAnUncheckedTSCIsNeverAdopted: where the kernel's verdict is unknown
// and the cross-CPU check cannot run (GOMAXPROCS=1, however many CPUs the
// OS moves the thread between), the default clock retries the check
// (3 s, doubling, five times) and stays on the portable source for good:
// the TSC is adopted only after a check that ran and found no warp. In a
// testing/synctest bubble, so that the 93 s of retries take none.
func TestAnUncheckedTSCIsNeverAdopted(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		fake := func() int64 { return int64(time.Since(start)) }
		hw := Source{Name: "tsc", Bits: 64, Rate: 1e9, Read: func() uint64 { return uint64(fake()) }}
		c, err := newClock(Portable(), rating{hz: 1e9, origin: rateDeclared},
			&tracker{ref: fake, witness: fake, src: hw, endsOnRegister: true})
		require.NoError(t, err)
		c.st.policy = &trustPolicy{hw: hw, report: trustReport{kernel: "kernel clocksource unknown (hidden)"}, trustPending: true, needsEvidence: true}
		c.start()
		defer c.Close()
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.checkTrust()
		}()
		tries := map[string]bool{}
		for checking := true; checking; {
			select {
			case <-done:
				checking = false
			case <-time.After(time.Second):
			}
			in := c.Info()
			tries[in.Evidence.Pending] = true
			if in.Source != "portable" {
				require.True(t, strings.HasPrefix(in.Evidence.CrossCPU, "no warp"), "on %s after %v, with CrossCPU %q", in.Source, time.Since(start), in.Evidence.CrossCPU)
			}
		}
		t.Logf("pending was: %v", tries)
		assert.Contains(t, tries, "the cross-CPU check, again in 48s (try 6 of 6)", "the check is retried")
		bubbleSleep(time.Minute)
		in := c.Info()
		assert.Equal(t, "portable", in.Source)
		assert.Contains(t, in.Evidence.CrossCPU, "not run")
		assert.Contains(t, in.Evidence.Rejected, "no evidence")
		assert.Empty(t, in.Evidence.Pending)
	})
}

// TestARefusedRegisterKeepsTheDefaultClocksChecks: a Register that fails
// (its Source's Read panics) leaves the default clock as it was, its
// calibration, its watch and its following of the kernel's verdict
// included.
func TestARefusedRegisterKeepsTheDefaultClocksChecks(t *testing.T) {
	hw := realtime1GHz()
	hw.Rate = 1e9
	tr := &tracker{ref: rawNow, src: hw, adopted: true, endsOnRegister: true}
	c, err := newClock(hw, rating{hz: 1e9, origin: rateMeasured}, tr)
	require.NoError(t, err)
	c.st.policy = &trustPolicy{verdict: func() string { return "" }}
	err = c.Register(Source{Name: "broken", Bits: 64, Rate: 2e9, Read: func() uint64 { panic("broken counter") }})
	assert.ErrorIs(t, err, ErrInvalidSource)
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	assert.Same(t, tr, c.st.track, "the calibration and the watch go on")
	assert.NotNil(t, c.st.policy.verdict, "the kernel's verdict is still followed")
	assert.Equal(t, "hw", c.st.src.Name)
}

// TestTheCountersOwnEvidenceIsFollowedForLife builds the default clock as
// package initialisation does, on a counter the kernel runs on and whose
// own evidence (a paravirtual page's stable bit) holds at start: the
// clock runs on it, Info shows the evidence, and when the evidence goes
// (the hypervisor clears the stable bit) while the kernel still vouches,
// the clock falls back to the portable source, saying why, never
// stepping back.
func TestTheCountersOwnEvidenceIsFollowedForLife(t *testing.T) {
	base := time.Now()
	page := Source{Name: "page", Bits: 64, Rate: 1e9, Read: func() uint64 { return uint64(time.Since(base)) }}
	var cleared atomic.Bool
	kernelFile := filepath.Join(t.TempDir(), "current_clocksource")
	require.NoError(t, os.WriteFile(kernelFile, []byte("kvm-clock\n"), 0o644))
	c := newChosenDefaultClock([]*descriptor{{
		Arch: runtime.GOARCH,
		Probe: func() (Source, rateOrigin, float64, error) {
			return page, rateNanoseconds, 0, nil
		},
		Verdict: func() kernel.Verdict { return kernel.ReadVerdict(kernelFile, "kvm-clock") },
		Evidence: func() string {
			if cleared.Load() {
				return "PVCLOCK_TSC_STABLE_BIT is clear"
			}
			return ""
		},
		Describe: func() string { return fmt.Sprintf("test page, stable %v", !cleared.Load()) },
	}})
	defer func() { require.NoError(t, c.Close()) }()
	in := c.Info() // the first use: the background work starts
	require.Equal(t, "page", in.Source, "%+v", in)
	assert.Equal(t, rateNanoseconds.String(), in.RateOrigin)
	assert.Equal(t, "test page, stable true", in.Evidence.CounterCheck)
	assert.Contains(t, in.Evidence.Kernel, "kvm-clock")
	before := c.nanos()
	cleared.Store(true)
	c.st.mu.Lock()
	c.st.policy.verdictDue = time.Now()
	c.unlock()
	c.kick()
	require.Eventually(t, func() bool { return c.Info().Source == "portable" }, 5*time.Second, time.Millisecond)
	in = c.Info()
	assert.Contains(t, in.Evidence.Rejected, "page: PVCLOCK_TSC_STABLE_BIT is clear")
	assert.Equal(t, "test page, stable false", in.Evidence.CounterCheck)
	assert.GreaterOrEqual(t, c.nanos(), before)
	c.st.mu.Lock()
	assert.Nil(t, c.st.track, "the page is no longer watched")
	assert.Nil(t, c.st.policy.verdict, "nor followed")
	c.unlock()
}

// TestCloseCutsANapShort: Close ends a sleepUnlessClosed at once (the
// cross-CPU check's retries sleep minutes), which then reports the
// clock closed.
func TestCloseCutsANapShort(t *testing.T) {
	c, err := newClock(Portable(), rating{hz: 1e9, origin: rateDeclared}, nil)
	require.NoError(t, err)
	c.start()
	woke := make(chan bool, 1)
	go func() { woke <- c.sleepUnlessClosed(time.Hour) }()
	require.Eventually(t, func() bool {
		c.st.mu.Lock()
		defer c.st.mu.Unlock()
		return len(c.st.loop.naps) == 1
	}, 10*time.Second, time.Millisecond, "the nap never started")
	require.NoError(t, c.Close())
	select {
	case open := <-woke:
		assert.False(t, open, "a closed clock's nap reports it open")
	case <-time.After(time.Hour / 360): // a loaded machine delays the end by milliseconds, not seconds
		t.Fatal("Close left the hour's nap to run")
	}
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	assert.Empty(t, c.st.loop.naps, "the nap left itself behind")
}

// TestTheDefaultClockFollowsTheKernelBack: a default clock on a counter
// the kernel runs on leaves it for the portable source when the kernel
// leaves it (switched by hand to another clocksource), and goes back to
// it when the kernel does, at the next poll of the kernel's word (every
// verdictReturnPeriod while on the fall back): twice over, never
// stepping back, its Evidence saying at each stage what the kernel's
// clocksource is and whether the counter is rejected for it.
func TestTheDefaultClockFollowsTheKernelBack(t *testing.T) {
	for _, kernelConverts := range []bool{false, true} {
		followTheKernelBack(t, kernelConverts)
	}
}

// followTheKernelBack is TestTheDefaultClockFollowsTheKernelBack on a
// counter at a rate CPUID gives, or converted with the kernel's own
// conversion (read again at each return).
func followTheKernelBack(t *testing.T, kernelConverts bool) {
	dir := t.TempDir()
	current := filepath.Join(dir, "current_clocksource")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "available_clocksource"), []byte("tsc kvm-clock \n"), 0o644))
	setKernel := func(cs string) { // whole, as sysfs shows it: never an empty file
		require.NoError(t, os.WriteFile(current+".new", []byte(cs+"\n"), 0o644))
		require.NoError(t, os.Rename(current+".new", current))
	}
	setKernel("tsc")
	hw := realtime1GHz()
	hw.Rate = 1e9
	desc := &descriptor{
		Arch: runtime.GOARCH,
		Probe: func() (Source, rateOrigin, float64, error) {
			return hw, rateCPUID, 0, nil
		},
		Verdict: func() kernel.Verdict { return kernel.ReadVerdict(current, "tsc") },
	}
	origin := rateCPUID.String()
	if kernelConverts {
		desc.VDSOMode, origin = vdsoModeTSC, rateKernel.String()
	}
	var asked atomic.Int32
	c := newDefaultClock([]*descriptor{desc})
	c.st.policy.readKernelConv = func(mode int32, read func() uint64) (kernelConv, error) {
		asked.Add(1)
		return kernelConv{conv: conversion{mult: 1<<24 + 3, shift: 24, mask: ^uint64(0)}, hz: math.Ldexp(1e9, 24) / (1<<24 + 3)}, nil
	}
	c.chooseHardware()
	defer func() { require.NoError(t, c.Close()) }()
	in := c.Info() // the first use
	require.Equal(t, "hw", in.Source, "%+v", in)
	c.st.policy.startSetUp()
	poll := func() {
		c.st.mu.Lock()
		c.st.policy.verdictDue = time.Now()
		c.unlock()
		c.kick()
	}
	last := c.nanos()
	for round := range 2 {
		setKernel("kvm-clock")
		poll()
		require.Eventually(t, func() bool { return c.Info().Source == "portable" }, 5*time.Second, time.Millisecond, "round %d: never left", round)
		in = c.Info()
		assert.Contains(t, in.Evidence.Rejected, "hw: kernel clocksource is kvm-clock, not tsc", "round %d", round)
		assert.Contains(t, in.Evidence.Kernel, "kernel clocksource is kvm-clock, not tsc", "round %d: the kernel's word as read", round)
		assert.Contains(t, in.Evidence.Pending, "hw: back on it once the kernel runs on it again", "round %d", round)
		assert.GreaterOrEqual(t, c.nanos(), last)
		last = c.nanos()

		setKernel("tsc")
		poll()
		require.Eventually(t, func() bool { return c.Info().Source == "hw" }, 5*time.Second, time.Millisecond, "round %d: never back on the counter: %+v", round, c.Info().Evidence)
		in = c.Info()
		assert.Empty(t, in.Evidence.Rejected, "round %d", round)
		assert.Empty(t, in.Evidence.Pending, "round %d", round)
		assert.Equal(t, "kernel clocksource is tsc", in.Evidence.Kernel, "round %d", round)
		assert.Equal(t, origin, in.RateOrigin, "round %d: the rate it had", round)
		if kernelConverts {
			assert.Equal(t, int32(2+round), asked.Load(), "round %d: the kernel's conversion read again", round)
			assert.Equal(t, uint32(1<<24+3), in.Mult, "round %d", round)
		}
		assert.GreaterOrEqual(t, c.nanos(), last)
		last = c.nanos()
		c.st.mu.Lock()
		require.NotNil(t, c.st.track, "round %d: watched again", round)
		assert.True(t, c.st.track.adopted, "round %d", round)
		assert.NotNil(t, c.st.policy.verdict, "round %d: the kernel's word followed again", round)
		c.unlock()
	}
}

// TestAFailedCheckOnTheFallBackIsForGood: a counter whose checks fail
// (a cross-CPU warp) while the clock waits on the portable source for
// the kernel's word is not gone back to when the kernel runs on it
// again: the fall back is then for good, and Evidence says why; checks
// that pass leave it waiting, Pending saying what for.
func TestAFailedCheckOnTheFallBackIsForGood(t *testing.T) {
	dir := t.TempDir()
	current := filepath.Join(dir, "current_clocksource")
	setKernel := func(cs string) {
		require.NoError(t, os.WriteFile(current+".new", []byte(cs+"\n"), 0o644))
		require.NoError(t, os.Rename(current+".new", current))
	}
	setKernel("kvm-clock")
	hw := realtime1GHz()
	hw.Rate = 1e9
	c := newChosenDefaultClock([]*descriptor{{
		Arch: runtime.GOARCH,
		Probe: func() (Source, rateOrigin, float64, error) {
			return hw, rateCPUID, 0, nil
		},
		Verdict: func() kernel.Verdict { return kernel.ReadVerdict(current, "tsc") },
	}})
	defer func() { require.NoError(t, c.Close()) }()
	c.st.mu.Lock()
	c.st.policy.verdict = c.st.policy.lostTrust(&descriptor{Verdict: func() kernel.Verdict { return kernel.ReadVerdict(current, "tsc") }}, "hw")
	c.followKernelLocked(time.Now().Add(time.Hour)) // the kernel left it: on the portable source, waiting
	require.NotNil(t, c.st.policy.back)
	// Checks that pass leave it waiting, and say what for.
	c.checkedLocked(warp.Report{Verdict: warp.None, CPUs: 2, Pairs: 1, Reads: 100}, "", nil)
	assert.NotNil(t, c.st.policy.back)
	assert.Contains(t, c.st.policy.report.pending, "hw: back on it once")
	c.checkedLocked(warp.Report{Verdict: warp.Found, CPUs: 2, Pairs: 1, Reads: 100, Warps: 1, Before: 1, Cycles: 5000, Ns: 5000}, "", nil)
	assert.Nil(t, c.st.policy.back, "still waiting to go back to a warped counter")
	setKernel("tsc")
	c.followKernelLocked(time.Now().Add(2 * time.Hour))
	c.unlock()
	in := c.Info()
	assert.Equal(t, "portable", in.Source)
	assert.Contains(t, in.Evidence.Rejected, "cross-CPU warp")
}
