package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
)

func TestRunFirstLineNamesTheSource(t *testing.T) {
	var out bytes.Buffer
	cfg := config{rounds: 5, roundLen: 200 * time.Microsecond, settle: 2 * time.Second, drift: 20 * time.Millisecond}
	require.NoError(t, run(&out, cfg))
	in := schedclock.Default().Info()

	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	key, _, _ := strings.Cut(in.Source, " ")
	assert.Regexp(t, `^Now reads .*\(`+key+`\).*: [0-9.]+ ns a call, [0-9.]+x time\.Since here\.$`, lines[0])
	if in.Source == schedclock.Portable().Name {
		assert.Regexp(t, `^It (does not use|has not adopted|has not chosen)`, lines[1])
	} else {
		assert.Regexp(t, `^Trusted `, lines[1])
	}
	assert.LessOrEqual(t, len(lines), 50, "the output should fit one screen")
	summary, details := strings.Index(out.String(), "cost per call"), strings.Index(out.String(), "\ndetails:")
	assert.True(t, summary > 0 && details > summary, "the costs come before the details")
	assert.Contains(t, out.String(), "median of 5 rounds of 200µs a call")
	assert.Regexp(t, `BoundedWallNow +[0-9.]+ ns +[0-9.]+x time\.Now`, out.String())
	assert.Regexp(t, `\n  wall time bound: +(vmclock|clockbound|adjtimex|none)[ ,]`, out.String(), "the details say what bounds wall time")

	out.Reset()
	cfg.verbose = true
	require.NoError(t, run(&out, cfg))
	assert.Regexp(t, `min +25% +median +75% +max`, out.String(), "-v prints the rounds' spread")
}

// Costs as a first short measurement got them wrong: time.Since read 107 ns
// in a first round and about 31 after. The summary must print medians.
func TestSummaryPrintsMedians(t *testing.T) {
	costs := []callCost{
		{timedCall{name: "schedclock.Now", against: "time.Since"}, []float64{25, 480, 24, 26, 25}},
		{timedCall{name: "schedclock.Since", against: "time.Since"}, []float64{27, 26, 150, 28, 27}},
		{timedCall{name: "schedclock.Coarse", against: "time.Since"}, []float64{0.3, 0.5, 0.3, 12, 0.4}},
		{timedCall{name: "schedclock.WallNow", against: "time.Now"}, []float64{31, 33, 32, 600, 30}},
		{timedCall{name: "time.Since"}, []float64{107, 31, 30, 66, 32}},
		{timedCall{name: "time.Now"}, []float64{64, 350, 57, 54, 55}},
	}
	in := schedclock.Info{Source: "kvm-clock (pvclock, stable)"}
	var out bytes.Buffer
	printSummary(&out, in, costs, time.Millisecond)

	lines := strings.Split(out.String(), "\n")
	assert.Equal(t, "Now reads the hypervisor's clock page (kvm-clock): 25.0 ns a call, 0.78x time.Since here.", lines[0])
	assert.Contains(t, out.String(), "median of 5 rounds of 1ms a call")
	assert.Regexp(t, `schedclock\.Now +25\.0 ns +0\.78x time\.Since \(32\.0 ns\)`, out.String())
	assert.Regexp(t, `schedclock\.Since +27\.0 ns +0\.84x time\.Since \(32\.0 ns\)`, out.String())
	assert.Regexp(t, `schedclock\.Coarse +0\.4 ns +0\.01x time\.Since \(32\.0 ns\)`, out.String())
	assert.Regexp(t, `schedclock\.WallNow +32\.0 ns +0\.56x time\.Now \(57\.0 ns\)`, out.String())
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{7}, 7},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{30, 31, 107, 32, 29}, 31},
		{[]float64{1, 1000, 1000, 2, 3}, 3},
	} {
		in := append([]float64(nil), tc.xs...)
		assert.Equal(t, tc.want, median(in), "median of %v", tc.xs)
		assert.Equal(t, tc.xs, in, "median changed its input")
	}
}

// Each round runs every call once, starting one call further on than the
// round before, and each call gets one figure a round.
func TestMeasureCostsInterleaves(t *testing.T) {
	var order []string
	call := func(name string) timedCall {
		return timedCall{name: name, loop: func(n int) { order = append(order, name) }}
	}
	costs := measureCosts([]timedCall{call("a"), call("b"), call("c")}, 4, time.Microsecond)
	for _, c := range costs {
		assert.Len(t, c.rounds, 4, c.name)
	}
	require.GreaterOrEqual(t, len(order), 12)
	assert.Equal(t, strings.Fields("a b c b c a c a b a b c"), order[len(order)-12:])
}

func TestTrustReasons(t *testing.T) {
	pvclock := schedclock.Info{
		Source: "kvm-clock (pvclock, stable)",
		Evidence: schedclock.Evidence{
			Kernel:       "kernel clocksource is kvm-clock",
			CounterCheck: "pvclock page at 0x7f0000000000 in [vvar], version 10, flags 0x1 (stable; [vvar])",
			CrossCPU:     "cross-CPU check not run: one allowed CPU",
		},
	}
	assert.Equal(t, []string{"the kernel runs on the same clock", "the page says it is stable"}, trustReasons(pvclock))

	tsc := schedclock.Info{
		Source: "tsc",
		Evidence: schedclock.Evidence{
			Kernel:   "kernel clocksource is hpet, not tsc",
			CrossCPU: "no warp across 2 CPUs (1 pair, 52000 cross-CPU reads, 10ms)",
		},
	}
	assert.Equal(t, []string{"a cross-CPU check found no CPU's reading behind another's"}, trustReasons(tsc))
}

func TestSummaryOnThePortableSource(t *testing.T) {
	costs := []callCost{
		{timedCall{name: "schedclock.Now"}, []float64{30}},
		{timedCall{name: "time.Since"}, []float64{30}},
	}
	rejected := `tsc: not trusted yet: kernel clocksource is hpet, not tsc, and the cross-CPU check has not passed`
	var out bytes.Buffer
	printSummary(&out, schedclock.Info{Source: "portable", Evidence: schedclock.Evidence{Rejected: rejected}}, costs, time.Millisecond)
	lines := strings.Split(out.String(), "\n")
	assert.Equal(t, "Now reads Go's monotonic clock (portable), as time.Since does: 30.0 ns a call, 1.00x time.Since here.", lines[0])
	assert.Equal(t, "It does not use the hardware counter: "+rejected+".", lines[1])
}

func TestUndecided(t *testing.T) {
	assert.True(t, undecided(schedclock.Info{Source: "portable"}), "on the portable source, with no reason given")
	assert.True(t, undecided(schedclock.Info{Source: "portable", Evidence: schedclock.Evidence{Pending: "tsc: adopted once its rate is measured"}}))
	assert.False(t, undecided(schedclock.Info{Source: "portable", Evidence: schedclock.Evidence{Rejected: "tsc: unusable rate 0 Hz"}}))
	assert.False(t, undecided(schedclock.Info{Source: "kvm-clock (pvclock, stable)", Evidence: schedclock.Evidence{CrossCPU: "no warp across 2 CPUs"}}))
	assert.True(t, undecided(schedclock.Info{Source: "kvm-clock (pvclock, stable)", Evidence: schedclock.Evidence{CrossCPU: "running"}}), "the cross-CPU check runs")
}

func TestJoinAnd(t *testing.T) {
	assert.Equal(t, "", joinAnd(nil))
	assert.Equal(t, "a", joinAnd([]string{"a"}))
	assert.Equal(t, "a and b", joinAnd([]string{"a", "b"}))
	assert.Equal(t, "a, b and c", joinAnd([]string{"a", "b", "c"}))
}
