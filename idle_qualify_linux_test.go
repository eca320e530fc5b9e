//go:build linux

package schedclock_test

import (
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/internal/cpu"
	"github.com/schedclock/schedclock/internal/race"
	"github.com/schedclock/schedclock/internal/testenv"
)

// idleEnv names, in a child process, what it does before idling: "use"
// reads Now and Coarse for a second, "wall" Now, Coarse and WallNow,
// "none" never touches the clock.
const idleEnv = "SCHEDCLOCK_IDLE_CHILD"

// idleFor is how long a child idles while its CPU time is measured.
const idleFor = 10 * time.Second

// timerWakeUps is how many times the "timer" child, which never touches
// the clock, wakes from a sleep in idleFor: the yardstick of what a
// wake-up costs on this machine, now.
const timerWakeUps = 20

// TestIdleCostAfterCoarse measures, from outside (getrusage of each child
// process), the CPU a process spends in the idleFor that follow a second
// of Now and Coarse, against one that never reads the clock (the package
// imported, its goroutine parked: what a program without the import
// spends, plus nothing): at most what timerWakeUps (20) wake-ups of a bare
// sleeping goroutine cost a third child over the same idleFor, beside
// them. What a wake-up costs depends on the machine and its load (about
// 250 µs of CPU in these KVM guests, quiet, twice that when loaded); the
// yardstick is measured in the same run, under the same load. Both tests
// run their children at once, so they take idleFor and a second.
func TestIdleCostAfterCoarse(t *testing.T) {
	spent := idleCosts(t, "use", "none", "timer")
	wakeUps := spent["timer"] - spent["none"]
	if race.Enabled {
		wakeUps *= 4 // the clock's wake-ups run instrumented Go code, a bare sleep's hardly any
	}
	t.Logf("CPU over %v idle: %v after a second of Now and Coarse, %v never reading the clock, %v with %d timer wake-ups",
		idleFor, spent["use"], spent["none"], spent["timer"], timerWakeUps)
	assert.LessOrEqual(t, spent["use"]-spent["none"], wakeUps,
		"idle CPU above a process that never read the clock, against %d timer wake-ups beside it", timerWakeUps)
}

// processCPUTime is the CPU time (user and system) of the process so
// far, and how many times its threads went to sleep (voluntary context
// switches: each wake-up ends in one).
func processCPUTime() (time.Duration, int64) {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), int64(ru.Nvcsw)
}

func idleChild(mode string) int {
	if mode == "use" || mode == "wall" {
		for start := time.Now(); time.Since(start) < time.Second; {
			schedclock.Now()
			schedclock.Coarse()
			if mode == "wall" {
				schedclock.WallNow()
			}
			time.Sleep(50 * time.Microsecond)
		}
		settle()
	} else {
		time.Sleep(time.Second)
	}
	cpu0, sleeps0 := processCPUTime()
	if mode == "timer" {
		for range timerWakeUps {
			time.Sleep(idleFor / timerWakeUps)
		}
	} else {
		time.Sleep(idleFor)
	}
	cpu1, sleeps1 := processCPUTime()
	fmt.Printf("idlecpu %s %d %d\n", mode, cpu1-cpu0, sleeps1-sleeps0)
	return 0
}

// settle waits, up to settleFor, until the default clock's set-up has
// nothing pending: a cross-CPU check that could not run beside the other
// children's second of use is retried warpRetryAfter later, and that
// retry (milliseconds of two pinned threads) is the set-up's, not an
// idle wake-up. It prints what was still pending if it gave up.
func settle() {
	deadline := time.Now().Add(settleFor)
	for {
		pending := schedclock.Default().Info().Evidence.Pending
		if pending == "" {
			return
		}
		if time.Now().After(deadline) {
			fmt.Printf("still pending after %v: %s\n", settleFor, pending)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// settleFor bounds settle: the first two retries of the cross-CPU check.
const settleFor = 10 * time.Second

// pendingLine is what settle prints when it gives up.
var pendingLine = regexp.MustCompile(`still pending after .*`)

// idleCosts runs a child process of this test binary in each idle mode
// (idleChild), all at once, and returns the CPU each spent in its idle
// window: the qualification layer's (it takes 11 s). It skips, saying
// why, under an emulator, and runs in parallel with the other idle test
// (the children only idle).
func idleCosts(t *testing.T, modes ...string) map[string]time.Duration {
	testenv.Qualify(t)
	if cpu.Emulated() {
		// What an idle process spends under user-mode emulation is the
		// emulator's, and a child forked under qemu-user can hang on a
		// lock another of its threads held (one did, for 8m36s, under
		// qemu-ppc64le, while the other idle test's children ran).
		t.Skip("under an emulator: the idle CPU would be qemu's; make qualify measures it natively")
	}
	t.Parallel()
	line := regexp.MustCompile(`idlecpu (\w+) (\d+)`)
	var wg sync.WaitGroup
	spent := map[string]time.Duration{}
	var mu sync.Mutex
	for _, mode := range modes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := runTestChild(t, idleEnv+"="+mode)
			if !assert.NoError(t, err, "child:\n%s", out) {
				return
			}
			m := line.FindSubmatch(out)
			if !assert.NotNil(t, m, "child:\n%s", out) {
				return
			}
			ns, _ := strconv.ParseInt(string(m[2]), 10, 64)
			if p := pendingLine.Find(out); p != nil {
				t.Logf("%s child: %s", mode, p)
			}
			mu.Lock()
			spent[mode] = time.Duration(ns)
			mu.Unlock()
		}()
	}
	wg.Wait()
	require.Len(t, spent, len(modes))
	return spent
}
