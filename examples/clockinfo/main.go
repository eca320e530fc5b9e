// Command clockinfo shows what the default schedclock clock decided (its
// counter, rate and where the rate came from, the trust checks it ran),
// a few readings (Now, Coarse, WallNow beside time.Now), and the clock's
// drift against the kernel's raw monotonic clock over one second.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/schedclock/schedclock"
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
	wall, std := schedclock.WallNow(), time.Now()
	fmt.Printf("  WallNow() = %s  (time.Now() %s, %+v apart)\n",
		wall.Format(time.RFC3339Nano), std.Format(time.RFC3339Nano), wall.Sub(std.Round(0)))

	fmt.Printf("\ndrift against %s over one second:\n", rawName)
	clock0, raw0 := pair()
	time.Sleep(time.Second)
	clock1, raw1 := pair()
	dClock, dRaw := clock1-clock0, raw1-raw0
	fmt.Printf("  clock advanced %d ns, %s %d ns: %+.3f ppm\n",
		dClock, rawName, dRaw, float64(dClock-dRaw)/float64(dRaw)*1e6)

	fmt.Println()
	printInfo("after one second", schedclock.Default().Info())
	if dRaw <= 0 || dClock <= 0 {
		os.Exit(1)
	}
}

// pair reads the clock and the raw clock back to back, keeping the
// tightest of a few brackets.
func pair() (clock, raw int64) {
	best := int64(1 << 62)
	for i := 0; i < 20; i++ {
		a := schedclock.Now()
		r := rawNow()
		b := schedclock.Now()
		if b-a < best {
			best, clock, raw = b-a, a+(b-a)/2, r
		}
	}
	return clock, raw
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
	fmt.Printf("  cross-CPU     %s\n", orNone(in.CrossCPU))
	if in.CounterCheck != "" {
		fmt.Printf("  counter check %s\n", in.CounterCheck)
	}
	fmt.Printf("  re-anchored   %d times", in.Reanchors)
	if in.LastReanchor != "" {
		fmt.Printf(" (last: %s)", in.LastReanchor)
	}
	fmt.Println()
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
