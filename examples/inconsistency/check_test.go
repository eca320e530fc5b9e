package main

import (
	"bytes"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
)

// counting returns a clock that advances 10 ns per call and, at every
// call number that back(n) selects, returns a value stepped back by
// 5000 ns instead.
func counting(back func(n int64) bool) func() int64 {
	var n int64
	return func() int64 {
		n++
		if back(n) {
			return n*10 - 5000
		}
		return n * 10
	}
}

func TestCheckPassesSchedclock(t *testing.T) {
	c, err := schedclock.New(schedclock.Portable())
	require.NoError(t, err)
	defer c.Close()
	res := check(func(int) func() int64 { return func() int64 { return int64(c.Now()) } }, max(2, runtime.GOMAXPROCS(0)), time.Millisecond, 100_000)
	assert.Zero(t, res.inversions(), "%v", res.examples)
	assert.GreaterOrEqual(t, res.reads, int64(200_000))
}

func TestCheckCatchesAStepBackWithinAGoroutine(t *testing.T) {
	res := check(func(int) func() int64 { return counting(func(n int64) bool { return n%1000 == 0 }) },
		1, time.Millisecond, 100_000)
	assert.GreaterOrEqual(t, res.own, int64(100))
	assert.Equal(t, res.own, res.reads/1000, "every step back, and nothing else")
	assert.Zero(t, res.cross)
	// Stepped back 5000 ns from a value 10 ns ahead of the previous one.
	assert.Equal(t, int64(4990), res.largest)
	assert.NotEmpty(t, res.examples)
}

// kernelBatchInversions is the kernel's inconsistency-check.c on a
// sequence of readings: it fills a list of 64 and compares neighbours
// within it, then starts a new list.
func kernelBatchInversions(readings []int64) int {
	const callsPerLoop = 64
	inversions := 0
	for start := 0; start+callsPerLoop <= len(readings); start += callsPerLoop {
		list := readings[start : start+callsPerLoop]
		for i := 0; i < callsPerLoop-1; i++ {
			if list[i+1] < list[i] {
				inversions++
			}
		}
	}
	return inversions
}

// TestCheckHasNoBlindSpotBetweenBatches steps the clock back at the first
// reading of every batch of 64, where the kernel's check does not look.
func TestCheckHasNoBlindSpotBetweenBatches(t *testing.T) {
	atBatchStart := func(n int64) bool { return n%64 == 1 && n > 1 }
	var readings []int64
	clk := counting(atBatchStart)
	for range 64 * 1000 {
		readings = append(readings, clk())
	}
	require.Zero(t, kernelBatchInversions(readings), "the kernel's check sees these steps back after all")

	res := check(func(int) func() int64 { return counting(atBatchStart) }, 1, time.Millisecond, 64*1000)
	assert.GreaterOrEqual(t, res.own, int64(999))
	assert.Equal(t, (res.reads-1)/64, res.own)
}

// TestCheckCatchesAStepBackAcrossGoroutines gives goroutine 0 a clock a
// second ahead of the others': each goroutine's readings increase, but
// the others' readings go back against goroutine 0's.
func TestCheckCatchesAStepBackAcrossGoroutines(t *testing.T) {
	var truth, readsOfZero atomic.Int64
	clockFor := func(g int) func() int64 {
		if g == 0 {
			return func() int64 {
				readsOfZero.Add(1)
				return truth.Add(1) + int64(time.Second)
			}
		}
		first := true
		return func() int64 {
			// Goroutine 0's first reading has raised the mark once it
			// reads a second time.
			for first && readsOfZero.Load() < 2 {
				runtime.Gosched()
			}
			first = false
			return truth.Add(1)
		}
	}
	res := check(clockFor, 3, time.Millisecond, 10_000)
	assert.Zero(t, res.own)
	assert.GreaterOrEqual(t, res.cross, int64(2*(10_000-1)), "every reading of goroutines 1 and 2 after their first")
	assert.GreaterOrEqual(t, res.largest, int64(time.Second)-res.reads, "a second ahead, less the readings since")
}

func TestRun(t *testing.T) {
	var out, errOut bytes.Buffer
	assert.Equal(t, 0, run(&out, &errOut, []string{"-clock", "portable", "-duration", "20ms", "-goroutines", "2"}, openClock))
	assert.Contains(t, out.String(), "[OK]")
	assert.Contains(t, out.String(), "inversions 0 (0 within a goroutine, 0 across goroutines), largest step back 0 ns")
	assert.Regexp(t, `reads \d+ \([0-9.]+ M/s`, out.String())

	// A clock that steps back: exit status 1, the inversions listed.
	broken := func(string) (clock, error) {
		return clock{name: "broken", now: counting(func(n int64) bool { return n%100 == 0 }), close: func() {}}, nil
	}
	out.Reset()
	assert.Equal(t, 1, run(&out, &errOut, []string{"-duration", "20ms", "-goroutines", "1"}, broken))
	assert.Contains(t, out.String(), "[FAILED]")
	assert.Contains(t, out.String(), "goroutine 0: read ")
	assert.Contains(t, out.String(), "largest step back 4990 ns")

	// Bad flags, unknown clocks and refused counters: exit status 2.
	for _, args := range [][]string{{"-goroutines", "0"}, {"-duration", "0s"}, {"-clock", "sundial"}, {"extra"}, {"-bogus"}} {
		errOut.Reset()
		assert.Equal(t, 2, run(&out, &errOut, args, openClock), "%v", args)
		assert.NotEmpty(t, errOut.String(), "%v", args)
	}
	refused := func(string) (clock, error) { return clock{}, errors.New("no such counter here") }
	errOut.Reset()
	assert.Equal(t, 2, run(&out, &errOut, []string{"-clock", "hardware"}, refused))
	assert.Contains(t, errOut.String(), `clock "hardware": no such counter here`)
}

// TestHardwareClocks runs the hardware counters where this machine
// supports and trusts them, and checks that they are refused with the
// library's reason where it does not.
func TestHardwareClocks(t *testing.T) {
	for name, probe := range map[string]func() (schedclock.Source, error){"hardware": schedclock.Hardware, "paravirt": schedclock.Paravirt} {
		var out, errOut bytes.Buffer
		code := run(&out, &errOut, []string{"-clock", name, "-duration", "20ms"}, openClock)
		if _, err := probe(); err != nil {
			assert.Equal(t, 2, code, name)
			assert.Contains(t, errOut.String(), err.Error(), name)
		} else {
			assert.Equal(t, 0, code, "%s: %s%s", name, out.String(), errOut.String())
			assert.Contains(t, out.String(), "[OK]", name)
		}
	}
}
