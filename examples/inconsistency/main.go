// Command inconsistency checks that a schedclock clock never goes
// backwards, as the kernel's timer selftests check clock_gettime:
// inconsistency-check.c (one thread reads the clock in batches of 64 and
// compares neighbours) and threadtest.c (threads read the clock into one
// list under a lock, so that readings on different CPUs are compared).
//
//	go run ./examples/inconsistency                              # the default clock, GOMAXPROCS goroutines, 10 s
//	go run ./examples/inconsistency -clock hardware -duration 60s -goroutines 8
//
// Clocks: default (schedclock.Now), portable (New(Portable())), hardware
// (New(Hardware()): the TSC, CNTVCT_EL0, ..., where this machine supports
// and trusts the counter), paravirt (New(Paravirt()), a hypervisor's
// clock page).
//
// Unlike the kernel's tests it has no blind spot and needs no lock: the
// kernel's inconsistency check compares readings only within a batch, so
// a step back between two batches goes unseen, and threadtest serialises
// its threads on a mutex. Here every reading is compared with the
// previous one of the same goroutine, and with a high-water mark shared
// by all goroutines and loaded before the read: a reading below the mark
// went back against a reading that happened before it, on whatever CPU.
// The mark is raised with a compare-and-swap, never a lock.
//
// It prints the readings, readings per second, inversions and the largest
// step back, and exits 1 on any inversion, 2 if the clock cannot be made
// here (the reason is printed) or a flag is wrong.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/schedclock/schedclock"
)

func main() {
	os.Exit(run(os.Stdout, os.Stderr, os.Args[1:], openClock))
}

// run is the command: it parses args, checks the clock open makes and
// returns the exit status.
func run(out, errOut io.Writer, args []string, open func(name string) (clock, error)) int {
	fs := flag.NewFlagSet("inconsistency", flag.ContinueOnError)
	fs.SetOutput(errOut)
	goroutines := fs.Int("goroutines", runtime.GOMAXPROCS(0), "goroutines reading the clock")
	duration := fs.Duration("duration", 10*time.Second, "how long to read")
	clockName := fs.String("clock", "default", "the clock: default, portable, hardware or paravirt")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *goroutines < 1 || *duration <= 0 || fs.NArg() > 0 {
		fmt.Fprintln(errOut, "inconsistency: -goroutines must be at least 1, -duration positive, and no arguments")
		return 2
	}
	clk, err := open(*clockName)
	if err != nil {
		fmt.Fprintf(errOut, "inconsistency: clock %q: %v\n", *clockName, err)
		return 2
	}
	defer clk.close()

	fmt.Fprintf(out, "Consistent schedclock %s (%s) with %d goroutines for %v, %s %s/%s, GOMAXPROCS %d: ",
		clk.name, clk.describe, *goroutines, *duration, runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0))
	res := check(func(int) func() int64 { return clk.now }, *goroutines, *duration, 0)
	res.print(out)
	if res.inversions() > 0 {
		return 1
	}
	return 0
}

// clock is a clock to check.
type clock struct {
	name, describe string
	now            func() int64
	close          func()
}

func openClock(name string) (clock, error) {
	describeInfo := func(in schedclock.Info) string {
		s := fmt.Sprintf("%s, %d Hz (%s), %d bits", in.Source, in.Rate, in.RateOrigin, in.Bits)
		if in.Evidence.Rejected != "" {
			s += "; hardware counter not used: " + in.Evidence.Rejected
		}
		return s
	}
	fromSource := func(src schedclock.Source, err error, stop func()) (clock, error) {
		if err != nil {
			return clock{}, err
		}
		c, err := schedclock.New(src)
		if err != nil {
			stop()
			return clock{}, err
		}
		return clock{name: name, describe: describeInfo(c.Info()), now: func() int64 { return int64(c.Now()) }, close: func() {
			_ = c.Close()
			stop()
		}}, nil
	}
	nothing := func() {}
	switch name {
	case "default":
		return clock{name: name, describe: describeInfo(schedclock.Default().Info()), now: func() int64 { return int64(schedclock.Now()) }, close: nothing}, nil
	case "portable":
		return fromSource(schedclock.Portable(), nil, nothing)
	case "hardware":
		src, err := schedclock.Hardware()
		return fromSource(src, err, nothing)
	case "paravirt":
		src, err := schedclock.Paravirt()
		return fromSource(src, err, nothing)
	}
	return clock{}, errors.New("unknown clock: want default, portable, hardware or paravirt")
}
