package main

import (
	"bytes"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func bothCPUs(t *testing.T) [2]int {
	cpus, err := handoffCPUs()
	if err != nil {
		t.Skipf("the handoff check needs two CPUs: %v", err)
	}
	return cpus
}

func TestHandoffSeesNoStepInAMonotonicClock(t *testing.T) {
	var counter atomic.Int64
	res := checkHandoffs(func() int64 { return counter.Add(1) }, 20000, bothCPUs(t), time.Minute)
	if res.timedOut || res.handoffs != 20000 {
		t.Fatalf("checked %d handoffs (timed out: %v), want 20000", res.handoffs, res.timedOut)
	}
	if res.backwards != 0 {
		t.Errorf("a shared atomic counter went backwards %d times (largest step %d)", res.backwards, res.maxStep)
	}
}

// A clock that gives every 4th reading 1000 ns early must be caught, and
// its largest step must be what it steps back by, give or take the
// readings taken meanwhile.
func TestHandoffCatchesAClockThatStepsBack(t *testing.T) {
	var counter atomic.Int64
	read := func() int64 {
		n := counter.Add(1)
		if n%4 == 0 {
			return n - 1000
		}
		return n
	}
	res := checkHandoffs(read, 20000, bothCPUs(t), time.Minute)
	if res.backwards == 0 {
		t.Fatalf("no backward step seen in %d handoffs of a clock that steps back every 4th reading", res.handoffs)
	}
	if res.maxStep > 1000 {
		t.Errorf("largest step %d ns, but the clock never steps back by more than 1000", res.maxStep)
	}
}

// A coarse clock publishes the same value many times; every new
// publication is still a handoff, so the check ends.
func TestHandoffCountsRepeatedValues(t *testing.T) {
	res := checkHandoffs(func() int64 { return 42 }, 10000, bothCPUs(t), time.Minute)
	if res.timedOut || res.handoffs != 10000 || res.backwards != 0 {
		t.Fatalf("constant clock: %+v, want 10000 handoffs and no step", res)
	}
}

func TestHandoffStopsAtTheLimit(t *testing.T) {
	res := checkHandoffs(func() int64 { return 1 }, 1<<62, bothCPUs(t), 50*time.Millisecond)
	if !res.timedOut {
		t.Fatalf("%d handoffs done without the limit", res.handoffs)
	}
}

func TestDriftBetween(t *testing.T) {
	from := pairing{clock: 500, raw: 1000, width: 100}
	to := pairing{clock: 500 + 2_000_002_000, raw: 1000 + 2_000_000_000, width: 300}
	d := driftBetween(from, to)
	if d.ppm < 0.999999 || d.ppm > 1.000001 {
		t.Errorf("ppm = %v, want 1 (2000 ns over 2 s)", d.ppm)
	}
	if d.plusMinus < 0.0999999 || d.plusMinus > 0.1000001 {
		t.Errorf("± = %v, want 0.1 ((100+300)/2 ns over 2 s)", d.plusMinus)
	}
}

func TestPairBracketsTheReading(t *testing.T) {
	p := pair(rawNow, 50)
	if p.width <= 0 || p.clock < p.raw-p.width/2 || p.clock > p.raw+p.width/2+1 {
		t.Fatalf("the raw clock read against itself: %+v, want the reading inside the bracket", p)
	}
}

func TestMedian(t *testing.T) {
	if m := median([]float64{5, 1, 3}); m != 3 {
		t.Errorf("median(5,1,3) = %v", m)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median(4,1,3,2) = %v", m)
	}
}

func TestInittraceLine(t *testing.T) {
	m := inittraceLine.FindStringSubmatch("init github.com/loov/hrtime @0.52 ms, 0.12 ms clock, 512 bytes, 3 allocs")
	if m == nil || m[1] != "github.com/loov/hrtime" || m[2] != "0.12" {
		t.Fatalf("parsed %q", m)
	}
}

// Every row of both tables has as many cells as its header, and a clock
// that could not be opened is listed with its reason instead of a row.
func TestReportTablesAreWellFormed(t *testing.T) {
	cfg := config{rounds: 1, benchtime: time.Millisecond, startupRuns: 1, handoffs: 10, drift: []time.Duration{time.Second, 2 * time.Second}, features: true}
	results := []*result{
		{clock: clock{name: referenceClock}, cost: readCost{10, 9, 11}, drift: []drift{{1, 0.1}, {0.5, 0.05}}, checked: true, handoff: handoffResult{handoffs: 10}},
		{clock: clock{name: "stepper", pkgs: []string{"p"}}, cost: readCost{5, 5, 6}, drift: []drift{{-3, 0.1}, {-3, 0.05}}, checked: true, handoff: handoffResult{handoffs: 10, backwards: 2, maxStep: 1500}},
		{clock: clock{name: "absent"}, openErr: errors.New("not here")},
	}
	var out bytes.Buffer
	report(&out, results, readCost{1, 1, 1}, cfg, [2]int{0, 1}, nil)
	text := out.String()
	if !strings.Contains(text, "absent: not measured: not here") {
		t.Errorf("the unopened clock's reason is missing:\n%s", text)
	}
	if !strings.Contains(text, "| stepper | 5.0 (5.0-6.0) | 0.50 |") || !strings.Contains(text, "| 2 / 10 | 1.5 µs |") {
		t.Errorf("the stepper's row is wrong:\n%s", text)
	}
	var tables, cells int
	for line := range strings.Lines(text) {
		if !strings.HasPrefix(line, "|") {
			cells = 0
			continue
		}
		n := strings.Count(line, "|")
		if cells == 0 {
			tables++
			cells = n
		} else if n != cells {
			t.Errorf("row with %d bars in a table whose header has %d: %s", n, cells, line)
		}
	}
	if tables != 2 {
		t.Errorf("%d tables, want the figures and the features", tables)
	}
	for _, f := range features {
		if len(f.cells) != len(featureColumns) {
			t.Errorf("features of %s: %d cells for %d columns", f.name, len(f.cells), len(featureColumns))
		}
	}
}
