// Command clockinfo shows what the default schedclock clock reads and why
// it trusts it, what its calls cost on this machine against the time
// package's (medians of interleaved rounds), what it guarantees, a few
// live readings and its drift against CLOCK_MONOTONIC_RAW, and then the
// kernel-level detail: conversion, refresh, reference, checks, faults.
//
//	go run ./examples/clockinfo       # about one screen
//	go run ./examples/clockinfo -v    # the rounds' spread, the kernel's clocks too
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/internal/measure"
)

func main() {
	verbose := flag.Bool("v", false, "also print the spread of the rounds' costs, and time the kernel's clocks as Sources")
	flag.Parse()
	cfg := defaultConfig
	cfg.verbose = *verbose
	if err := run(os.Stdout, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "clockinfo:", err)
		os.Exit(1)
	}
}

// config says how long clockinfo measures; tests shorten it.
type config struct {
	rounds   int           // rounds of the cost measurement
	roundLen time.Duration // each call's share of a round
	settle   time.Duration // longest wait for the default clock's choice
	drift    time.Duration // how long the drift is measured over
	verbose  bool
}

// Many short rounds: on a busy machine (load 20 on 2 CPUs) most rounds
// of a few milliseconds contain a preemption and read several times too
// slow, while most of 0.5 ms do not, and the median then ignores those
// that do.
var defaultConfig = config{rounds: 45, roundLen: 500 * time.Microsecond, settle: 2 * time.Second, drift: time.Second}

func run(out io.Writer, cfg config) error {
	schedclock.Now()            // the first use starts the default clock's checks
	schedclock.WallNow()        // the first pairs the clock with the wall clock
	schedclock.BoundedWallNow() // the first opens what bounds wall time's error
	in := settledInfo(cfg.settle)

	costs := measureCosts(timedCalls(cfg.verbose), cfg.rounds, cfg.roundLen)
	printSummary(out, in, costs, cfg.roundLen)
	if cfg.verbose {
		printRounds(out, costs)
	}

	fmt.Fprintln(out, "\nwhat it guarantees:")
	fmt.Fprintln(out, "  Now never goes back: a reading is never below one taken before it, on any goroutine.")
	fmt.Fprintln(out, "  Now never waits: a call ends in a few steps, whatever the clock's updater is doing.")

	fmt.Fprintln(out)
	printReadings(out)
	if err := printDrift(out, cfg.drift); err != nil {
		return err
	}

	fmt.Fprintln(out, "\ndetails:")
	printDetails(out, schedclock.Default().Info())
	return nil
}

// settledInfo returns the default clock's Info once it has chosen what it
// runs on (it may still be adopting its hardware counter: measuring its
// rate, or checking it in the background), or after wait.
func settledInfo(wait time.Duration) schedclock.Info {
	deadline := time.Now().Add(wait)
	for {
		in := schedclock.Default().Info()
		if !undecided(in) || time.Now().After(deadline) {
			return in
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// undecided reports whether the default clock still waits for something
// before it settles on a counter: it runs on the portable source and says
// neither why (Rejected) nor what for (Pending), or it says it waits, or
// its first cross-CPU check (which the timings would slow) has not ended.
func undecided(in schedclock.Info) bool {
	return in.Evidence.Pending != "" || in.Source == schedclock.Portable().Name && in.Evidence.Rejected == "" ||
		in.Evidence.CrossCPU == "running" || strings.HasPrefix(in.Evidence.CrossCPU, "not run yet")
}

// plainNames says what each of the library's counters is, by the first
// word of its Source name.
var plainNames = map[string]string{
	"tsc":           "the CPU's time-stamp counter",
	"kvm-clock":     "the hypervisor's clock page",
	"xen":           "the hypervisor's clock page",
	"pvclock":       "the hypervisor's clock page",
	"hyperv":        "the hypervisor's TSC page",
	"cntvct":        "the CPU's virtual counter",
	"rdtime":        "the CPU's time counter",
	"timebase":      "the CPU's time base",
	"tod":           "the CPU's time-of-day clock",
	"stablecounter": "the CPU's stable counter",
}

// plainSource names a Source in plain words, with the name the library
// gives it: "the hypervisor's clock page (kvm-clock)".
func plainSource(name string) string {
	if name == schedclock.Portable().Name {
		return "Go's monotonic clock (portable), as time.Since does"
	}
	key, _, _ := strings.Cut(name, " ")
	if what, ok := plainNames[key]; ok {
		return what + " (" + key + ")"
	}
	return name
}

// trustReasons says in plain words why the default clock trusts its
// hardware counter, from the evidence Info records.
func trustReasons(in schedclock.Info) []string {
	var why []string
	if strings.HasPrefix(in.Evidence.Kernel, "kernel clocksource is ") && !strings.Contains(in.Evidence.Kernel, ", not ") {
		why = append(why, "the kernel runs on the same clock")
	}
	if strings.Contains(in.Evidence.CounterCheck, "(stable") {
		why = append(why, "the page says it is stable")
	}
	if strings.HasPrefix(in.Evidence.CrossCPU, "no warp") {
		why = append(why, "a cross-CPU check found no CPU's reading behind another's")
	}
	return why
}

func printSummary(out io.Writer, in schedclock.Info, costs []callCost, roundLen time.Duration) {
	now, since := costOf(costs, "schedclock.Now"), costOf(costs, "time.Since")
	fmt.Fprintf(out, "Now reads %s: %.1f ns a call, %.2fx time.Since here.\n",
		plainSource(in.Source), now, now/since)
	switch {
	case in.Source == schedclock.Portable().Name && in.Evidence.Pending != "":
		fmt.Fprintf(out, "It has not adopted a hardware counter yet; it waits for %s.\n", in.Evidence.Pending)
	case in.Source == schedclock.Portable().Name && in.Evidence.Rejected != "":
		fmt.Fprintf(out, "It does not use the hardware counter: %s.\n", in.Evidence.Rejected)
	case in.Source == schedclock.Portable().Name:
		fmt.Fprintln(out, "It has not chosen its counter yet.")
	default:
		if why := trustReasons(in); len(why) > 0 {
			fmt.Fprintf(out, "Trusted because %s.\n", joinAnd(why))
		} else {
			fmt.Fprintln(out, "Trusted on the evidence under details.")
		}
	}

	fmt.Fprintf(out, "\ncost per call here (median of %d rounds of %v a call, interleaved):\n", len(costs[0].rounds), roundLen)
	for _, c := range costs {
		if c.against == "" {
			continue
		}
		base := costOf(costs, c.against)
		fmt.Fprintf(out, "  %-18s %6.1f ns  %5.2fx %s (%.1f ns)\n", c.name, c.perCall(), c.perCall()/base, c.against, base)
	}
}

// joinAnd joins phrases as a sentence does: "a, b and c".
func joinAnd(phrases []string) string {
	if len(phrases) < 2 {
		return strings.Join(phrases, "")
	}
	return strings.Join(phrases[:len(phrases)-1], ", ") + " and " + phrases[len(phrases)-1]
}

func printRounds(out io.Writer, costs []callCost) {
	fmt.Fprintf(out, "  %-18s %6s %6s %6s %6s %6s  (ns a call, over the rounds)\n", "", "min", "25%", "median", "75%", "max")
	for _, c := range costs {
		s := slices.Sorted(slices.Values(c.rounds))
		q := func(f float64) float64 { return s[int(f*float64(len(s)-1))] }
		fmt.Fprintf(out, "  %-18s %6.1f %6.1f %6.1f %6.1f %6.1f\n", c.name, s[0], q(0.25), c.perCall(), q(0.75), s[len(s)-1])
	}
}

// printReadings prints a few readings of each call beside time.Now: Now
// and Coarse are nanoseconds since the program started, WallNow is wall
// time read from the same counter.
func printReadings(out io.Writer) {
	fmt.Fprintln(out, "readings, 10 ms apart (Now and Coarse: ns since the program started):")
	fmt.Fprintf(out, "  %-18s %-18s %9s  %13s %13s %9s\n", "time.Now", "WallNow", "(apart)", "Now", "Coarse", "(behind)")
	for i := range 3 {
		if i > 0 {
			time.Sleep(10 * time.Millisecond)
		}
		// Coarse before Now: a Coarse that takes a fresh reading of Now
		// would otherwise be ahead of the Now read before it.
		std, wall, coarse, now := time.Now(), schedclock.WallNow(), schedclock.Coarse(), schedclock.Now()
		fmt.Fprintf(out, "  %-18s %-18s %9v  %13d %13d %9v\n",
			std.Format("15:04:05.000000000"), wall.Format("15:04:05.000000000"), wall.Sub(std),
			now, coarse, time.Duration(now-coarse))
	}
}

// printDrift measures how far Now drifts from CLOCK_MONOTONIC_RAW (the
// counter at the kernel's rate, without NTP's steering) over d.
func printDrift(out io.Writer, d time.Duration) error {
	ref, refName := measure.Raw, "CLOCK_MONOTONIC_RAW"
	if !measure.RawIsSyscall {
		refName = "Go's monotonic clock"
	}
	if raw, err := schedclock.Raw(); err == nil {
		ref = func() int64 { return int64(raw.Read()) } // the vDSO: a narrower bracket
	}
	// Each end: the reference read between two Nows, the tightest of 20.
	at0 := measure.Tightest(nowNanos, ref, 20)
	time.Sleep(d)
	at1 := measure.Tightest(nowNanos, ref, 20)
	dClock, dRef := at1.Mid-at0.Mid, at1.Inner-at0.Inner
	if dClock <= 0 || dRef <= 0 {
		return fmt.Errorf("over %v Now advanced %d ns and %s %d ns", d, dClock, refName, dRef)
	}
	ppm := func(ns int64) float64 { return float64(ns) / float64(dRef) * 1e6 }
	fmt.Fprintf(out, "drift against %s: %+.3f ppm ±%.3f (%+d ns over %v)\n",
		refName, ppm(dClock-dRef), ppm(at0.Width+at1.Width)/2, dClock-dRef, time.Duration(dRef))
	return nil
}

func printDetails(out io.Writer, in schedclock.Info) {
	line := func(label, format string, args ...any) {
		fmt.Fprintf(out, "  %-17s "+format+"\n", append([]any{label + ":"}, args...)...)
	}
	line("source", "%s, %d bits", in.Source, in.Bits)
	line("rate", "%d Hz, from %s (error %.3f ppm)", in.Rate, in.RateOrigin, in.RateErrorPPM)
	line("conversion", "ns = cycles × %d / 2^%d (rounding %+.5f ppm)", in.Mult, in.Shift, in.ConversionErrorPPM)
	line("refresh", "every %v (half the time until the counter wraps or cycles × %d overflows 64 bits)", in.RefreshPeriod, in.Mult)
	if in.Evidence.Rejected != "" {
		line("not used", "%s", in.Evidence.Rejected)
	}
	if in.Evidence.Pending != "" {
		line("waits for", "%s", in.Evidence.Pending)
	}
	if in.Evidence.Kernel != "" {
		line("kernel", "%s", in.Evidence.Kernel)
	}
	if in.Evidence.CounterCheck != "" {
		line("counter check", "%s", in.Evidence.CounterCheck)
	}
	if in.Evidence.CrossCPU != "" {
		line("cross-CPU check", "%s", in.Evidence.CrossCPU)
	}
	if in.Watch.Bracket > 0 {
		line("reference", "CLOCK_MONOTONIC_RAW, compared within %v (the narrowest bracket)", in.Watch.Bracket)
	}
	if in.Watch.Reference != "" {
		line("reference fault", "%s", in.Watch.Reference)
	}
	if in.WallBound != "" {
		line("wall time bound", "%s", in.WallBound)
	}
	line("re-anchored", "%d times%s", in.Watch.Reanchors, last(in.Watch.LastReanchor))
	line("refused readings", "%d%s", in.Watch.CounterFaults, last(in.Watch.LastCounterFault))
	line("faults recovered", "%d%s", in.Faults, last(in.LastFault))
	if in.LostWraps != 0 {
		line("lost wraps", "%d, added back", in.LostWraps)
	}
	if in.Suspended {
		line("suspended", "yes")
	}
}

func last(what string) string {
	if what == "" {
		return ""
	}
	return " (last: " + what + ")"
}

// A timedCall is one of the calls whose cost clockinfo measures: loop
// makes it n times. against names the time package's call it is compared
// with, empty for those.
type timedCall struct {
	name, against string
	loop          func(n int)
}

// timedCalls lists the calls clockinfo times; with kernelClocks, the
// kernel's clocks read as Sources (through the vDSO where it has them) too.
func timedCalls(kernelClocks bool) []timedCall {
	stdStart, start := time.Now(), schedclock.Now()
	calls := []timedCall{
		{"schedclock.Now", "time.Since", func(n int) {
			for range n {
				_ = schedclock.Now()
			}
		}},
		{"schedclock.Since", "time.Since", func(n int) {
			for range n {
				_ = schedclock.Since(start)
			}
		}},
		{"schedclock.Coarse", "time.Since", func(n int) {
			for range n {
				_ = schedclock.Coarse()
			}
		}},
		{"schedclock.WallNow", "time.Now", func(n int) {
			for range n {
				_ = schedclock.WallNow()
			}
		}},
		{"BoundedWallNow", "time.Now", func(n int) {
			for range n {
				_ = schedclock.BoundedWallNow()
			}
		}},
		{"time.Since", "", func(n int) {
			for range n {
				_ = time.Since(stdStart)
			}
		}},
		{"time.Now", "", func(n int) {
			for range n {
				_ = time.Now()
			}
		}},
	}
	if !kernelClocks {
		return calls
	}
	for _, k := range []struct {
		name string
		open func() (schedclock.Source, error)
	}{{"Raw().Read", schedclock.Raw}, {"Boottime().Read", schedclock.Boottime}} {
		if src, err := k.open(); err == nil {
			calls = append(calls, timedCall{k.name, "time.Since", func(n int) {
				for range n {
					src.Read()
				}
			}})
		}
	}
	return calls
}

// A callCost is a call's measured cost: ns a call, one figure a round.
type callCost struct {
	timedCall
	rounds []float64
}

// perCall is the median of the rounds: a round that another process, an
// interrupt or the garbage collector slowed does not move it.
func (c callCost) perCall() float64 { return median(c.rounds) }

// costOf is the cost of the call named name.
func costOf(costs []callCost, name string) float64 {
	i := slices.IndexFunc(costs, func(c callCost) bool { return c.name == name })
	return costs[i].perCall()
}

// measureCosts times each call rounds times, interleaved: each round runs
// every call for about roundLen, starting one call further on each round,
// so that a slow stretch of the machine falls on all of them alike.
func measureCosts(calls []timedCall, rounds int, roundLen time.Duration) []callCost {
	timeLoop := func(loop func(int), n int) time.Duration {
		t0 := time.Now()
		loop(n)
		return time.Since(t0)
	}
	costs := make([]callCost, len(calls))
	lengths := make([]int, len(calls))
	for i, c := range calls {
		costs[i].timedCall = c
		lengths[i] = measure.LoopLength(func(n int) time.Duration { return timeLoop(c.loop, n) }, roundLen, 10, 1000)
	}
	for r := range rounds {
		for k := range calls {
			i := (r + k) % len(calls)
			ns := float64(timeLoop(calls[i].loop, lengths[i])) / float64(lengths[i])
			costs[i].rounds = append(costs[i].rounds, ns)
		}
	}
	return costs
}

// median is the middle of xs (the mean of the two middle ones for an
// even count); xs is not changed.
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s) == 0 {
		return 0
	}
	mid := len(s) / 2
	if len(s)%2 == 0 {
		return (s[mid-1] + s[mid]) / 2
	}
	return s[mid]
}

// nowNanos is schedclock.Now as the plain nanoseconds measure works in.
func nowNanos() int64 { return int64(schedclock.Now()) }
