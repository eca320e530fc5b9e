package schedclock_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/internal/cpu"
	"github.com/schedclock/schedclock/internal/testenv"
)

// What the import weighs: programs in testdata/weight built with the go
// command and run in processes of their own, as a user's would be. The
// qualification layer's: they build with the go command, and weigh this
// toolchain's binaries and this machine's first calls.

// modulePath prefixes the packages of this module.
const modulePath = "github.com/schedclock/schedclock"

// buildWeightProgram builds testdata/weight/name with extra go build
// flags and returns the binary's path; t skips outside the qualification
// layer.
func buildWeightProgram(t *testing.T, name string, flags ...string) string {
	t.Helper()
	testenv.Qualify(t)
	if cpu.Emulated() {
		t.Skip("builds host programs: not under an emulator")
	}
	gocmd, err := exec.LookPath("go")
	require.NoError(t, err, "the go command builds the programs whose weight is measured")
	bin := filepath.Join(t.TempDir(), name)
	args := append(append([]string{"build", "-o", bin}, flags...), "./testdata/weight/"+name)
	cmd := exec.Command(gocmd, args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
	return bin
}

// serviceWeight bounds what the import adds to a stripped HTTP service
// on linux/amd64 (Go 1.26), as a fraction of the service: a library is
// weighed where it is used, beside net/http, which links fmt, strconv
// and most of what the package uses; a hello world that prints nothing
// is no such program. docs/default-clock.md has what it adds.
const serviceWeight = 0.06

// initLine matches a line of GODEBUG=inittrace=1.
var initLine = regexp.MustCompile(`^init (\S+) @[0-9.]+ ms, ([0-9.]+) ms clock, (\d+) bytes, (\d+) allocs`)

// TestImportDoesNothing runs a program that imports the package and never
// calls it: the package's initialisation allocates at most 3 objects and
// 336 bytes (the default clock's three channels),
// starts no goroutine and (where strace can show it) makes no system
// call, nor does any other package of the module's. Its clock time
// (inittrace's median of 12 runs) is logged, not asserted.
func TestImportDoesNothing(t *testing.T) {
	bin := buildWeightProgram(t, "imported")
	var clocks []float64
	for range 12 {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Run(), "%s", stderr.Bytes())
		assert.Equal(t, "goroutines 1\n", stdout.String(), "goroutines at main's start: the import started one")
		found := false
		for _, l := range strings.Split(stderr.String(), "\n") {
			m := initLine.FindStringSubmatch(l)
			if m == nil || !strings.HasPrefix(m[1], modulePath) {
				continue
			}
			allocs, _ := strconv.Atoi(m[4])
			if m[1] == modulePath {
				found = true
				ms, _ := strconv.ParseFloat(m[2], 64)
				clocks = append(clocks, ms)
				allocated, _ := strconv.Atoi(m[3])
				assert.LessOrEqual(t, allocs, 3, "%s", l)
				assert.LessOrEqual(t, allocated, 336, "%s", l)
			} else {
				assert.LessOrEqual(t, allocs, 1, "%s", l)
			}
		}
		if !found {
			clocks = append(clocks, 0) // nothing to initialise at all
		}
	}
	slices.Sort(clocks)
	t.Logf("init %s: median %.3f ms clock over %d runs (%v)", modulePath, clocks[len(clocks)/2], len(clocks), clocks)

	strace, err := exec.LookPath("strace")
	if err != nil || runtime.GOOS != "linux" {
		t.Log("no strace here: the system calls of initialisation are not checked")
		return
	}
	trace := filepath.Join(t.TempDir(), "trace")
	cmd := exec.Command(strace, "-f", "-qq", "-s", "256", "-o", trace, bin)
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Skipf("strace cannot trace here (%v): %s", err, out)
	}
	calls := initSyscalls(t, trace)
	for pkg, names := range calls {
		if strings.HasPrefix(pkg, modulePath) {
			assert.Empty(t, names, "system calls during the initialisation of %s", pkg)
		} else if len(names) > 0 {
			t.Logf("initialisation of %s (not this module's): %v", pkg, names)
		}
	}
}

// runtimeSyscalls are the system calls the runtime itself makes on a
// package's behalf while it initialises (memory for its allocations):
// not the package's. The goroutines a package would start are counted apart.
var runtimeSyscalls = map[string]bool{
	"mmap": true, "munmap": true, "madvise": true, "mprotect": true, // memory
	"futex": true, "sched_yield": true, "nanosleep": true, "rt_sigreturn": true, // scheduling, preemption
}

// initSyscalls reads an strace -f log of a program run with
// GODEBUG=inittrace=1 and returns, for each package that inittrace
// names, the system calls its initialisation made on the main thread
// (package initialisation runs there, the main goroutine locked to it):
// those between the runtime's report of the package before and its
// report of this one.
func initSyscalls(t *testing.T, trace string) map[string][]string {
	f, err := os.Open(trace)
	require.NoError(t, err)
	defer f.Close()
	lineRE := regexp.MustCompile(`^(\d+) +(\w+)\((.*)$`)
	quoted := regexp.MustCompile(`^2, "([^"]*)"`)
	calls := map[string][]string{}
	var mainTID string
	var pending []string
	naming := false // the runtime wrote "init ": its next write names the package
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		m := lineRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue // a resumed call, a signal, an exit
		}
		if mainTID == "" {
			mainTID = m[1] // execve
		}
		if m[1] != mainTID {
			continue
		}
		name, rest := m[2], m[3]
		if q := quoted.FindStringSubmatch(rest); name == "write" && q != nil {
			// The runtime's report, written in pieces: "init ", the
			// package, " @", the figures.
			switch {
			case q[1] == "init ":
				naming = true
			case naming:
				calls[q[1]] = pending
				pending, naming = nil, false
			}
			continue
		}
		if !runtimeSyscalls[name] {
			pending = append(pending, name)
		}
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, calls, "no inittrace report in the trace")
	return calls
}

// TestWeight builds a small HTTP service with and without one call of
// Now, both stripped (-ldflags='-s -w'): the import adds at most
// serviceWeight of the service. The same for a hello world is logged.
func TestWeight(t *testing.T) {
	if runtime.GOARCH != "amd64" || runtime.GOOS != "linux" {
		t.Skip("the bound is linux/amd64's")
	}
	size := func(name string) int64 {
		fi, err := os.Stat(buildWeightProgram(t, name, "-trimpath", "-ldflags=-s -w"))
		require.NoError(t, err)
		return fi.Size()
	}
	hello, hellonow := size("hello"), size("hellonow")
	t.Logf("stripped hello world %d bytes, with Now %d bytes: +%d bytes (+%.1f%%)",
		hello, hellonow, hellonow-hello, 100*float64(hellonow-hello)/float64(hello))
	service, servicenow := size("service"), size("servicenow")
	t.Logf("stripped HTTP service %d bytes, with Now %d bytes: +%d bytes (+%.1f%%)",
		service, servicenow, servicenow-service, 100*float64(servicenow-service)/float64(service))
	assert.LessOrEqual(t, float64(servicenow-service), serviceWeight*float64(service), "what the import adds to a stripped HTTP service")
}

// TestNarrowCounterSurvivesABusyGoroutine: a narrow counter the clock
// accepts never loses a wrap, even with GOMAXPROCS=1 and a goroutine that
// never yields, for 2 s of the machine's real scheduling (the
// qualification layer's).
func TestNarrowCounterSurvivesABusyGoroutine(t *testing.T) {
	testenv.Qualify(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	// 16 bits at 90 kHz wrap every 728 ms: among the narrowest accepted.
	src := realCounter("narrow", time.Now(), 16, 90_000, nil)
	c, err := schedclock.New(src)
	require.NoError(t, err)
	defer c.Close()
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		x := 0
		for !stop.Load() {
			x++
		}
	}()
	start := time.Now()
	c0 := c.Now()
	last := c0
	backwards := 0
	// The one stall no goroutine can help is the OS's: a process
	// descheduled (a loaded VM host) for longer than a fold may be late
	// comes back to a counter no fold has seen for 3/4 of a wrap, and the
	// Source doc says a Now may then step back. A busy goroutine that
	// kept the fold from running would show as a gap in the reading loop
	// too, but one during which the process used its CPU, as would a
	// process merely slowed by others beside it; an OS stall is a gap
	// during which it used almost none (under a tenth of it). Only that
	// excuses a step.
	tolerated := c.Info().RefreshPeriod * 6 // 7/8 of the wrap less a refresh period
	var stalled time.Duration
	prev := time.Now()
	prevCPU, _ := processCPU()
	for time.Since(start) < 2*time.Second {
		now := c.Now()
		if now < last {
			backwards++
		}
		last = now
		at := time.Now()
		cpu, ok := processCPU()
		if gap := at.Sub(prev); ok && gap > tolerated && cpu-prevCPU < gap/10 {
			stalled = max(stalled, gap)
		}
		prev, prevCPU = at, cpu
	}
	elapsed := time.Since(start)
	got := time.Duration(c.Now() - c0)
	stop.Store(true)
	wg.Wait()
	if stalled == 0 {
		assert.Zero(t, backwards)
	} else {
		t.Logf("the OS stopped the process for %v (a fold may be %v late): %d steps back", stalled, tolerated, backwards)
	}
	// Even across such a stall the next fold adds back any wrap lost.
	assert.InDelta(t, float64(elapsed), float64(got), float64(time.Millisecond), "elapsed %v, clock %v: a wrap was lost", elapsed, got)
}
