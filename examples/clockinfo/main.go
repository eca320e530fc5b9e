// Command clockinfo shows what the default schedclock clock decided (its
// counter, rate and where the rate came from, the trust checks it ran),
// a few readings (Now, Coarse, WallNow beside time.Now), the kernel's raw
// and boot-time clocks as Sources (which path reads them: the vDSO or a
// system call, and what a read costs) side by side with Now, and the
// clock's drift against CLOCK_MONOTONIC_RAW over one second.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/internal/measure"
)

func main() {
	start := time.Now()
	first := schedclock.Now()
	fmt.Printf("first Now() %d ns, %v after main started\n\n", first, time.Since(start))

	printInfo("at start", schedclock.Default().Info())

	fmt.Println("\nreadings:")
	prev := schedclock.Now()
	for i := 0; i < 5; i++ {
		now := schedclock.Now()
		fmt.Printf("  Now() = %15d ns  (+%d ns)   Coarse() = %15d ns\n", now, now-prev, schedclock.Coarse())
		prev = now
		time.Sleep(time.Millisecond)
	}
	t0 := time.Now()
	schedclock.WallNow() // the first pairs the clock with the wall clock
	setUp := time.Since(t0)
	wall, std := schedclock.WallNow(), time.Now()
	fmt.Printf("  WallNow() = %s  (time.Now() %s, %+v apart; the first WallNow took %v)\n",
		wall.Format(time.RFC3339Nano), std.Format(time.RFC3339Nano), wall.Sub(std.Round(0)), setUp)

	raw, rawErr := schedclock.Raw()
	boot, bootErr := schedclock.Boottime()
	fmt.Println("\nthe kernel's clocks as Sources (Raw, Boottime):")
	for _, c := range []struct {
		src schedclock.Source
		err error
	}{{raw, rawErr}, {boot, bootErr}} {
		if c.err != nil {
			fmt.Printf("  %v\n", c.err)
			continue
		}
		fmt.Printf("  %-66s %5.1f ns a read\n", c.src.Name, perRead(func() { c.src.Read() }))
	}
	fmt.Printf("  %-66s %5.1f ns a read\n", "schedclock.Now", perRead(func() { schedclock.Now() }))
	fmt.Printf("  %-66s %5.1f ns a read\n", "time.Since", perRead(func() { time.Since(start) }))
	if measure.RawIsSyscall {
		fmt.Printf("  %-66s %5.1f ns a read\n", "CLOCK_MONOTONIC_RAW by the system call (x/sys unix.ClockGettime)", perRead(func() { measure.Raw() }))
	}
	if rawErr == nil && bootErr == nil {
		fmt.Println("\nside by side, each read right after the one before (ns):")
		fmt.Printf("  %18s %20s %20s\n", "Now()", "CLOCK_MONOTONIC_RAW", "CLOCK_BOOTTIME")
		for i := 0; i < 3; i++ {
			n, r, b := schedclock.Now(), raw.Read(), boot.Read()
			fmt.Printf("  %18d %20d %20d\n", n, r, b)
			time.Sleep(10 * time.Millisecond)
		}
	}

	ref, refName := measure.Raw, rawName()
	if rawErr == nil {
		ref, refName = func() int64 { return int64(raw.Read()) }, "CLOCK_MONOTONIC_RAW (Raw)"
	}
	fmt.Printf("\ndrift against %s over one second:\n", refName)
	// Each end: the reference read between two Nows, the tightest of 20.
	at0 := measure.Tightest(schedclock.Now, ref, 20)
	time.Sleep(time.Second)
	at1 := measure.Tightest(schedclock.Now, ref, 20)
	dClock, dRaw := at1.Mid-at0.Mid, at1.Inner-at0.Inner
	w0, w1 := at0.Width, at1.Width
	fmt.Printf("  clock advanced %d ns, the reference %d ns: %+.3f ppm (brackets %d and %d ns: ±%.3f ppm)\n",
		dClock, dRaw, float64(dClock-dRaw)/float64(dRaw)*1e6, w0, w1, float64(w0+w1)/2/float64(dRaw)*1e6)

	fmt.Println()
	printInfo("after one second", schedclock.Default().Info())
	if dRaw <= 0 || dClock <= 0 {
		os.Exit(1)
	}
}

// perRead is the time one call of read takes, over 100,000 calls.
func perRead(read func()) float64 {
	const n = 100_000
	t0 := time.Now()
	for i := 0; i < n; i++ {
		read()
	}
	return float64(time.Since(t0)) / n
}

// rawName names measure.Raw in the output.
func rawName() string {
	if measure.RawIsSyscall {
		return "CLOCK_MONOTONIC_RAW (the system call)"
	}
	return "Go's monotonic clock"
}

func printInfo(when string, in schedclock.Info) {
	fmt.Printf("default clock (%s):\n", when)
	fmt.Printf("  source        %s (%d bits)\n", in.Source, in.Bits)
	fmt.Printf("  rate          %d Hz, from %s, estimated error %.3f ppm\n", in.Rate, in.RateOrigin, in.RateErrorPPM)
	fmt.Printf("  mult/shift    %d >> %d\n", in.Mult, in.Shift)
	fmt.Printf("  refresh every %v\n", in.RefreshPeriod)
	fmt.Printf("  conversion    rounding %+.5f ppm\n", in.ConversionErrorPPM)
	fmt.Printf("  suspended     %v\n", in.Suspended)
	if in.Rejected != "" {
		fmt.Printf("  hardware counter rejected: %s\n", in.Rejected)
	}
	if in.Pending != "" {
		fmt.Printf("  pending       %s\n", in.Pending)
	}
	if in.Kernel != "" {
		fmt.Printf("  kernel        %s\n", in.Kernel)
	}
	fmt.Printf("  cross-CPU     %s\n", orNone(in.CrossCPU))
	if in.CounterCheck != "" {
		fmt.Printf("  counter check %s\n", in.CounterCheck)
	}
	if in.ReferenceBracket > 0 {
		fmt.Printf("  reference     narrowest (clock, CLOCK_MONOTONIC_RAW, clock) bracket %v\n", in.ReferenceBracket)
	}
	fmt.Printf("  re-anchored   %d times", in.Reanchors)
	if in.LastReanchor != "" {
		fmt.Printf(" (last: %s)", in.LastReanchor)
	}
	fmt.Println()
	if in.CounterFaults != 0 {
		fmt.Printf("  refused       %d readings the counter cannot have produced (last: %s)\n", in.CounterFaults, in.LastCounterFault)
	}
	if in.Reference != "" {
		fmt.Printf("  reference     %s\n", in.Reference)
	}
	fmt.Printf("  faults        %d recovered", in.Faults)
	if in.LastFault != "" {
		fmt.Printf(" (last: %s)", in.LastFault)
	}
	fmt.Println()
	if in.LostWraps != 0 {
		fmt.Printf("  lost wraps    %d, added back\n", in.LostWraps)
	}
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
