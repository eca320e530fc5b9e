//go:build linux

package schedclock_test

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/schedclocktest"
)

// The default clock (default.go) from outside, each test in a process of
// its own, as its first use is once per process: nothing runs before it,
// and Now, Coarse, WallNow and Since read real time inside a
// testing/synctest bubble. default_internal_test.go holds its internal
// tests.

// TestInsideASynctestBubble runs, in a process of its own (the default
// clock's first use is once per process), the first calls of Now,
// Coarse, WallNow and Since inside a testing/synctest bubble, and a Clock
// made and closed there: real time, never fake time, never back, and the
// bubble exits cleanly.
func TestInsideASynctestBubble(t *testing.T) { inAProcessOfItsOwn(t, synctestChild) }

// inAProcessOfItsOwn runs child as the test t in a new process of this
// test binary, where nothing has read the default clock yet, and
// requires it to pass.
func inAProcessOfItsOwn(t *testing.T, child func(t *testing.T)) {
	const env = "SCHEDCLOCK_TEST_CHILD"
	if os.Getenv(env) == t.Name() {
		child(t)
		return
	}
	out, err := runTestChild(t, env+"="+t.Name(), "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	t.Logf("child:\n%s", out)
	require.NoError(t, err)
	assert.Contains(t, string(out), "--- PASS: "+t.Name())
}

// runTestChild runs this test binary again with args and one more
// environment variable. Under user-mode emulation (make test-arm64 runs
// the binary through qemu-aarch64, which passes execve to the host) the
// binary cannot be executed directly: the host says "exec format error",
// and the child runs through the same emulator, as go test -exec did.
func runTestChild(t *testing.T, env string, args ...string) ([]byte, error) {
	t.Helper()
	run := func(name string, args ...string) ([]byte, error) {
		cmd := exec.Command(name, args...)
		cmd.Env = append(os.Environ(), env)
		return cmd.CombinedOutput()
	}
	out, err := run(os.Args[0], args...)
	if !errors.Is(err, syscall.ENOEXEC) {
		return out, err
	}
	emulator := "qemu-" + map[string]string{"arm64": "aarch64", "amd64": "x86_64", "386": "i386", "loong64": "loongarch64"}[runtime.GOARCH]
	if emulator == "qemu-" {
		emulator += runtime.GOARCH // riscv64, ppc64le, s390x: qemu names them as Go does
	}
	if e := os.Getenv("QEMU"); e != "" {
		emulator = e
	}
	path, lerr := exec.LookPath(emulator)
	require.NoError(t, lerr, "this binary (GOARCH=%s) cannot be executed here (%v), and there is no %s to run it", runtime.GOARCH, err, emulator)
	return run(path, append([]string{os.Args[0]}, args...)...)
}

func realtime(t *testing.T) time.Time {
	var ts unix.Timespec
	require.NoError(t, unix.ClockGettime(unix.CLOCK_REALTIME, &ts))
	return time.Unix(ts.Unix())
}

func synctestChild(t *testing.T) {
	var last schedclock.Instant
	synctest.Test(t, func(t *testing.T) {
		fake := time.Now()
		n1 := schedclock.Now()
		co := schedclock.Coarse()
		wallBefore := realtime(t)
		w := schedclock.WallNow()
		wallAfter := realtime(t)
		bubbleSleep(time.Hour) // fake: the bubble's clock jumps an hour at once
		n2 := schedclock.Now()
		require.GreaterOrEqual(t, n2, n1)
		assert.Less(t, n2-n1, schedclock.Instant(time.Minute), "Now followed the bubble's fake hour")
		assert.GreaterOrEqual(t, co, n1, "Coarse behind the Now before it")
		assert.LessOrEqual(t, co, n2, "Coarse ahead of Now")
		assert.Less(t, schedclock.Since(n1), time.Minute, "Since read fake time")
		assert.False(t, w.Before(wallBefore.Add(-time.Millisecond)) || w.After(wallAfter.Add(time.Millisecond)),
			"WallNow %v outside the real wall clock's [%v, %v] (the bubble's fake time is %v)", w, wallBefore, wallAfter, fake)

		// A Clock made in the bubble, closed there: its goroutines leave.
		src, err := schedclock.Raw()
		require.NoError(t, err)
		c, err := schedclock.New(src)
		require.NoError(t, err)
		a := c.Now()
		_ = c.Coarse()
		bubbleSleep(time.Second)
		require.GreaterOrEqual(t, c.Now(), a)
		require.NoError(t, c.Close())

		// A manual clock is exact, bubble or not.
		mc, m := schedclocktest.NewManualClock(t)
		m.Advance(time.Hour)
		assert.Equal(t, schedclock.Instant(time.Hour), mc.Now())
		assert.Equal(t, mc.Now(), mc.Coarse())
		last = schedclock.Now()
	})
	// After the bubble: still monotonic, still the real wall clock (inside
	// brackets of it: a fixed tolerance from one reading would hold only
	// when nothing stalls the test between the two).
	require.GreaterOrEqual(t, schedclock.Now(), last)
	wallBefore := realtime(t)
	w := schedclock.WallNow()
	wallAfter := realtime(t)
	assert.False(t, w.Before(wallBefore.Add(-time.Millisecond)) || w.After(wallAfter.Add(time.Millisecond)),
		"WallNow %v outside the real wall clock's [%v, %v] after the bubble", w, wallBefore, wallAfter)
}

// TestNothingRunsBeforeFirstUse checks, in a process of its own, what
// importing the package costs before anything reads the default clock:
// no goroutine at all; that the first Now starts the clock's set-up,
// which runs the background loop, with no further use; and that Info,
// once the choice is made, tells it: the hardware counter, or why not
// (Rejected), not "portable" with nothing said.
func TestNothingRunsBeforeFirstUse(t *testing.T) { inAProcessOfItsOwn(t, firstUseChild) }

// schedclockGoroutines counts the goroutines whose stack runs through
// fn, a function of the package's ("(*Clock).background").
func schedclockGoroutines(fn string) int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "schedclock.(*Clock)."+fn+"(")
}

// anySchedclockGoroutine reports whether a goroutine runs code of the
// package (a test's own frames aside).
func anySchedclockGoroutine() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "github.com/schedclock/schedclock.") && !strings.Contains(g, "_test.") && !strings.Contains(g, "testing.") {
			return true
		}
	}
	return false
}

func firstUseChild(t *testing.T) {
	// Wait for the goroutines the test binary itself starts to settle.
	time.Sleep(10 * time.Millisecond)
	assert.False(t, anySchedclockGoroutine(), "a goroutine runs the package's code before its first use")
	assert.Zero(t, schedclockGoroutines("setUp"), "set-up before the first use")
	assert.Zero(t, schedclockGoroutines("background"), "background work before the first use")
	schedclock.Now()
	// The choice runs in the background from the first use on: Info
	// names it as pending until it is made (no second use prompts it).
	first := time.Now()
	var in schedclock.Info
	require.Eventually(t, func() bool {
		in = schedclock.Default().Info()
		return !strings.Contains(in.Evidence.Pending, "the choice of a hardware counter")
	}, 10*time.Second, time.Millisecond, "the first Now started no choice")
	t.Logf("Info %v after the first Now: Source %q, Evidence %+v", time.Since(first), in.Source, in.Evidence)
	if in.Source == schedclock.Portable().Name {
		assert.NotEmpty(t, in.Evidence.Rejected+in.Evidence.Pending, "on the portable source, saying neither why nor what for")
	}
	require.Eventually(t, func() bool { return schedclockGoroutines("background") == 1 }, 10*time.Second, time.Millisecond,
		"the first Now did not start the background loop")
}

// TestMain measures the idle cost, in a child that
// TestIdleCostAfterCoarse started, before the testing package starts
// anything: the process is then as close to a program's start as a test
// binary gets (its test goroutines, timers and output would otherwise
// run beside it on a machine of two CPUs); or it is a CPU-bound process
// that a qualification test runs beside itself (startCPUHogs). Otherwise
// it runs the tests.
func TestMain(m *testing.M) {
	if mode := os.Getenv(idleEnv); mode != "" {
		os.Exit(idleChild(mode))
	}
	if os.Getenv(cpuHogEnv) != "" {
		cpuHog()
	}
	os.Exit(m.Run())
}

// TestNilClockSuspendsTheDefault: Suspend and Resume of a nil *Clock are
// the default clock's, in a process of its own (the default clock is the
// process's).
func TestNilClockSuspendsTheDefault(t *testing.T) {
	inAProcessOfItsOwn(t, func(t *testing.T) {
		var c *schedclock.Clock
		require.NoError(t, c.Suspend())
		assert.True(t, schedclock.Default().Info().Suspended, "the default clock suspended")
		frozen := schedclock.Now()
		time.Sleep(time.Millisecond)
		assert.Equal(t, frozen, schedclock.Now(), "the default clock stands still")
		require.NoError(t, c.Resume())
		assert.False(t, schedclock.Default().Info().Suspended)
		time.Sleep(time.Millisecond)
		assert.Greater(t, schedclock.Now(), frozen)
	})
}
