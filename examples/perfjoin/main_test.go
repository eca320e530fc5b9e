//go:build linux

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/schedclock/schedclock/internal/cpu"
)

// tracing is tracefs, mounted if it was not: perf's tracepoints and
// ftrace need it. Root only (the test skips otherwise, with the reason).
func tracing(t *testing.T) string {
	if os.Getenv("SCHEDCLOCK_KERNEL_TRACE") != "1" {
		// perf and ftrace record the whole machine's system calls for a
		// second, as root, and perf drops events when the machine is
		// busy (9518 stamps for 10,000 calls in one run beside make
		// test): make kernel-trace runs them, not every go test ./...
		t.Skip("records the machine's system calls with perf and ftrace: opt in with SCHEDCLOCK_KERNEL_TRACE=1 (make kernel-trace does)")
	}
	if cpu.Emulated() {
		// The test binary runs under qemu-user, and the program it builds
		// (for the same GOARCH) could not be run but through it.
		t.Skip("under an emulator: the join is the host's kernel's, measured natively")
	}
	if os.Geteuid() != 0 {
		t.Skip("the kernel's trace clocks need root: perf's tracepoints and ftrace")
	}
	dir := "/sys/kernel/tracing"
	if _, err := os.Stat(filepath.Join(dir, "events")); err != nil {
		if err := unix.Mount("nodev", dir, "tracefs", 0, ""); err != nil {
			t.Skipf("tracefs is not mounted and cannot be (%v)", err)
		}
	}
	return dir
}

// run builds and runs perfjoin through wrap (a tracer's command line
// before the program's, or none); it returns the calling thread's id
// and the spans.
func run(t *testing.T, clock string, wrap ...string) (tid int, spans [][2]int64) {
	bin := filepath.Join(t.TempDir(), "perfjoin")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	args := append(wrap, bin, "-clock", clock, "-n", strconv.Itoa(spansN))
	cmd := exec.Command(args[0], args[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err = cmd.Output()
	require.NoError(t, err, "%s", stderr.Bytes())
	sc := bufio.NewScanner(bytes.NewReader(out))
	require.True(t, sc.Scan())
	_, err = fmt.Sscanf(sc.Text(), "tid %d", &tid)
	require.NoError(t, err, sc.Text())
	for sc.Scan() {
		var a, b int64
		_, err := fmt.Sscanf(sc.Text(), "%d %d", &a, &b)
		require.NoError(t, err, sc.Text())
		spans = append(spans, [2]int64{a, b})
	}
	require.Len(t, spans, spansN)
	return tid, spans
}

var spansN = 10000

// join checks that the i-th kernel stamp (ns, each the instant rounded
// to the nearest multiple of resolution: a stamp s says the instant lies
// in [s-resolution/2, s+resolution/2), as ftrace's ns2usecs rounds, and
// is the instant itself at resolution 1) lies in the i-th span.
func join(t *testing.T, what string, spans [][2]int64, stamps []int64, resolution int64) {
	require.Len(t, stamps, len(spans), "%s: one kernel stamp per call", what)
	slices.Sort(stamps)
	outside, widths := 0, make([]int64, len(spans))
	for i, s := range spans {
		widths[i] = s[1] - s[0]
		lo, hi := stampCovers(stamps[i], resolution)
		if hi < s[0] || lo > s[1] {
			if outside < 5 {
				t.Logf("%s: call %d stamped %d outside [%d, %d]", what, i, stamps[i], s[0], s[1])
			}
			outside++
		}
	}
	slices.Sort(widths)
	t.Logf("%s: %d of %d kernel stamps outside their span; median span %v", what, outside, len(spans), time.Duration(widths[len(widths)/2]))
	assert.Zero(t, outside, "%s: kernel stamps outside their spans", what)
}

// stampCovers is the instants [lo, hi] a stamp s rounded to the nearest
// multiple of resolution can stand for: ftrace prints ns2usecs(ts), which
// is (ts + 500) / 1000, so "s µs" is every ts in [s·1000-500, s·1000+499].
func stampCovers(s, resolution int64) (lo, hi int64) {
	return s - resolution/2, s + (resolution-1)/2
}

// stampsOf is the stamps, in ns, of the lines of a trace that line
// matches as (thread id, seconds, fraction in units of unit ns), for the
// thread tid.
func stampsOf(trace string, tid int, line *regexp.Regexp, unit int64) []int64 {
	var stamps []int64
	for l := range strings.Lines(trace) {
		m := line.FindStringSubmatch(l)
		if m == nil || m[1] != strconv.Itoa(tid) {
			continue
		}
		sec, _ := strconv.ParseInt(m[2], 10, 64)
		frac, _ := strconv.ParseInt(m[3], 10, 64)
		stamps = append(stamps, sec*1e9+frac*unit)
	}
	return stamps
}

// TestJoinWithPerfMonotonic: perf record -k CLOCK_MONOTONIC stamps each
// getpid of perfjoin inside its span mapped onto CLOCK_MONOTONIC.
func TestJoinWithPerfMonotonic(t *testing.T) {
	tracing(t)
	if _, err := exec.LookPath("perf"); err != nil {
		t.Skip("no perf in PATH")
	}
	data := filepath.Join(t.TempDir(), "perf.data")
	// -m: a 4 MB ring (the default 512 KB holds about 5,000 of the
	// 10,000 events, and perf drops what it cannot drain in time on a
	// busy machine: 9518 stamps for 10,000 calls once, beside make test).
	tid, spans := run(t, "monotonic", "perf", "record", "-q", "-m", "1024", "-k", "CLOCK_MONOTONIC",
		"-e", "raw_syscalls:sys_enter", "--filter", "id == 39", "-o", data, "--")
	out, err := exec.Command("perf", "script", "-i", data, "--ns", "-F", "tid,time").Output()
	require.NoError(t, err)
	stamps := stampsOf(string(out), tid, regexp.MustCompile(`^\s*(\d+)\s+(\d+)\.(\d{9}):`), 1)
	join(t, "perf -k CLOCK_MONOTONIC", spans, stamps, 1)
}

// TestJoinWithFtraceBoottime: ftrace's boot clock (CLOCK_BOOTTIME)
// stamps each getpid inside its span mapped onto CLOCK_BOOTTIME, to its
// text output's microsecond. perf record -k CLOCK_BOOTTIME would be the
// same join, but perf refuses that clock for tracepoints ("wrong
// clockid (7)" on Linux 6.18); ftrace stamps the same events with it.
func TestJoinWithFtraceBoottime(t *testing.T) {
	dir := tracing(t)
	write := func(file, s string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, file), []byte(s), 0o644), file)
	}
	clocks, err := os.ReadFile(filepath.Join(dir, "trace_clock"))
	require.NoError(t, err)
	was := regexp.MustCompile(`\[(\w+)\]`).FindSubmatch(clocks)
	require.NotNil(t, was, "%s", clocks)
	ev := "events/raw_syscalls/sys_enter/"
	write("trace_clock", "boot")
	write(ev+"filter", "id == 39")
	write("trace", "")
	write(ev+"enable", "1")
	defer func() {
		write(ev+"enable", "0")
		write(ev+"filter", "0")
		write("trace_clock", string(was[1]))
	}()
	tid, spans := run(t, "boottime")
	write(ev+"enable", "0")
	out, err := os.ReadFile(filepath.Join(dir, "trace"))
	require.NoError(t, err)
	stamps := stampsOf(string(out), tid, regexp.MustCompile(`-(\d+)\s+\[\d+\].*?\s(\d+)\.(\d{6}): sys_enter: NR 39 `), 1000)
	join(t, "ftrace boot", spans, stamps, 1000)
}

// TestStampCovers: a stamp covers what its rounding maps to it: ftrace's
// ns2usecs prints 1.000001 s for 1,000,000,500 ns to 1,000,001,499 ns,
// and perf's ns stamps are the instant.
func TestStampCovers(t *testing.T) {
	usecs := func(ns int64) int64 { return (ns + 500) / 1000 } // the kernel's ns2usecs
	lo, hi := stampCovers(1_000_001_000, 1000)
	assert.Equal(t, int64(1_000_000_500), lo)
	assert.Equal(t, int64(1_000_001_499), hi)
	for _, ns := range []int64{lo - 1, lo, hi, hi + 1} {
		assert.Equal(t, usecs(ns) == 1_000_001, lo <= ns && ns <= hi, "%d ns", ns)
	}
	lo, hi = stampCovers(1234, 1)
	assert.Equal(t, [2]int64{1234, 1234}, [2]int64{lo, hi})
}
