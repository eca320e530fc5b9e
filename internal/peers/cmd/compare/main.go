// Command compare measures schedclock and its peers side by side, in one
// run on one machine, and prints a Markdown report for the README:
//
//   - ns per read: interleaved rounds, median;
//   - start-up cost: package initialisation (GODEBUG=inittrace=1) plus
//     the first reading, in a fresh child process per clock;
//   - rate error against CLOCK_MONOTONIC_RAW after 2 s and 12 s;
//   - backward steps in a cross-thread handoff check;
//   - a features table read from each peer's source.
//
// Run it from the repository root with make peers, or here with
// go run ./cmd/compare (-quick for a shorter run).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"strings"
	"time"
)

type config struct {
	rounds      int
	benchtime   time.Duration
	startupRuns int
	handoffs    int64
	handoffMax  time.Duration
	drift       []time.Duration
	only        *regexp.Regexp
	features    bool
	load        [2]string // load average at the start and the end of the run
}

func main() {
	child := flag.Int("startup-child", -1, "internal: measure the start-up of clock `i` and exit")
	quick := flag.Bool("quick", false, "a shorter run: 20ms per read-cost sample, 3 start-up runs, 10^6 handoffs (the drift intervals stay)")
	rounds := flag.Int("rounds", 8, "interleaved read-cost `rounds`")
	benchtime := flag.Duration("benchtime", 100*time.Millisecond, "length of one read-cost sample")
	startupRuns := flag.Int("startup-runs", 5, "child processes per clock for the start-up cost (the median is kept)")
	handoffs := flag.Int64("handoffs", 10_000_000, "cross-thread handoffs checked per clock")
	handoffMax := flag.Duration("handoff-limit", 60*time.Second, "time limit of the handoff check per clock")
	drift := flag.String("drift", "2s,12s", "comma-separated intervals after which the rate error is measured")
	only := flag.String("only", "", "measure only clocks whose name matches this `regexp`")
	feats := flag.Bool("features", true, "print the features table")
	flag.Parse()

	rows := clocks()
	if *child >= 0 {
		os.Exit(childMain(rows, *child))
	}

	cfg := config{
		rounds: *rounds, benchtime: *benchtime, startupRuns: *startupRuns,
		handoffs: *handoffs, handoffMax: *handoffMax, features: *feats,
	}
	if *quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["benchtime"] {
			cfg.benchtime = 20 * time.Millisecond
		}
		if !set["startup-runs"] {
			cfg.startupRuns = 3
		}
		if !set["handoffs"] {
			cfg.handoffs = 1_000_000
		}
	}
	for _, s := range strings.Split(*drift, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || d <= 0 {
			fatalf("bad -drift interval %q", s)
		}
		cfg.drift = append(cfg.drift, d)
	}
	var err error
	if cfg.only, err = regexp.Compile(*only); err != nil {
		fatalf("bad -only: %v", err)
	}
	if cfg.rounds < 1 || cfg.startupRuns < 1 || cfg.handoffs < 0 {
		fatalf("-rounds and -startup-runs must be at least 1, -handoffs at least 0")
	}
	self, err := os.Executable()
	if err != nil {
		fatalf("cannot find this program to re-run it: %v", err)
	}
	run(os.Stdout, os.Stderr, self, rows, cfg)
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "compare: "+format+"\n", args...)
	os.Exit(2)
}

// result is what was measured for one clock.
type result struct {
	clock
	read     func() int64
	openErr  error
	cost     readCost
	startup  startupCost
	startErr error
	drift    []drift
	handoff  handoffResult
	checked  bool // the handoff check ran
}

func run(out, progress io.Writer, self string, rows []clock, cfg config) {
	loadBefore := loadAverage()
	var results []*result
	for i, row := range rows {
		if !cfg.only.MatchString(row.name) {
			continue
		}
		r := &result{clock: row}
		r.read, r.openErr = row.open()
		if r.openErr == nil {
			fmt.Fprintf(progress, "start-up: %s\n", row.name)
			r.startup, r.startErr = measureStartup(self, row, i, cfg.startupRuns)
		}
		results = append(results, r)
	}
	measured := measuredOnly(results)
	reads := make([]func() int64, 0, len(measured)+1)
	floor := func() int64 { return 1 }
	reads = append(reads, floor)
	for _, r := range measured {
		reads = append(reads, r.read)
	}

	fmt.Fprintf(progress, "ns/read: %d rounds of %v per clock\n", cfg.rounds, cfg.benchtime)
	costs := measureReadCost(reads, cfg.rounds, cfg.benchtime)
	floorCost := costs[0]
	for i, r := range measured {
		r.cost = costs[i+1]
	}

	cpus, cpuErr := handoffCPUs()
	if cpuErr == nil && runtime.GOMAXPROCS(0) < 2 {
		cpuErr = fmt.Errorf("GOMAXPROCS is %d", runtime.GOMAXPROCS(0))
	}
	if cpuErr == nil && cfg.handoffs > 0 {
		for _, r := range measured {
			fmt.Fprintf(progress, "handoffs: %s\n", r.name)
			r.handoff = checkHandoffs(r.read, cfg.handoffs, cpus, cfg.handoffMax)
			r.checked = true
		}
	}

	fmt.Fprintf(progress, "drift: waiting %v\n", cfg.drift[len(cfg.drift)-1])
	drifts := measureDrift(reads[1:], cfg.drift)
	for i, r := range measured {
		r.drift = drifts[i]
	}

	cfg.load = [2]string{loadBefore, loadAverage()}
	report(out, results, floorCost, cfg, cpus, cpuErr)
}

func measuredOnly(results []*result) []*result {
	var m []*result
	for _, r := range results {
		if r.openErr == nil {
			m = append(m, r)
		}
	}
	return m
}
