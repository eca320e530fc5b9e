package schedclock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sync/atomic"
	"time"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/schedclocktest"
)

// Time a piece of work: Now returns nanoseconds on the default clock,
// Since the time elapsed since such a reading.
func Example() {
	start := schedclock.Now()
	time.Sleep(2 * time.Millisecond)
	fmt.Println(schedclock.Since(start) >= 2*time.Millisecond)
	// Output: true
}

func ExampleNow() {
	a := schedclock.Now()
	b := schedclock.Now()
	fmt.Println(b >= a) // never backwards, across goroutines too
	// Output: true
}

// Since never returns a negative duration: a start later than now gives
// 0.
func ExampleSince() {
	fmt.Println(schedclock.Since(schedclock.Now().Add(time.Hour)))
	// Output: 0s
}

// A Clock on a counter of your own: here a 32-bit counter at 1 MHz that
// the example advances by hand.
func ExampleNew() {
	var counter atomic.Uint64
	c, err := schedclock.New(schedclock.Source{
		Name: "my-counter",
		Read: counter.Load,
		Bits: 32,
		Rate: 1_000_000,
	})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	counter.Add(1500) // 1.5 ms
	fmt.Println(c.Now())
	// A counter with no rate is refused.
	_, err = schedclock.New(schedclock.Source{Name: "no rate", Read: counter.Load, Bits: 64})
	fmt.Println(errors.Is(err, schedclock.ErrInvalidSource))
	// Output:
	// 1.5ms
	// true
}

// A jiffy counter is a Source that needs no hardware and ticks at HZ,
// as the kernel's clock does before its counter is registered: a Clock
// on it advances in whole ticks (here 1 ms), and a rate outside
// 1..MaxHZ is refused.
func ExampleNewJiffies() {
	j, err := schedclock.NewJiffies(1000)
	if err != nil {
		panic(err)
	}
	defer j.Stop()
	c, err := schedclock.New(j.Source())
	if err != nil {
		panic(err)
	}
	defer c.Close()
	start := c.Now()
	time.Sleep(3 * time.Millisecond)
	fmt.Println(c.Since(start)%time.Millisecond == 0)
	_, err = schedclock.NewJiffies(0)
	fmt.Println(err)
	// Output:
	// true
	// schedclock: invalid source "jiffies": HZ = 0, want 1..100000
}

// A Clock with a reference refines its counter's rate against it and
// watches the counter for life: here a counter that runs 20 ppm fast is
// refined against Go's monotonic clock. It prints "refined true 0" once
// the first refinements are done; how long those take in real time is
// the machine's, so go test does not run it (TestReferenceRefinesTheRate
// proves the same in a testing/synctest bubble).
func ExampleWithReference() {
	start := time.Now()
	reference := func() int64 { return int64(time.Since(start)) }
	fast := func() uint64 { return uint64(float64(time.Since(start)) * 1.00002) }
	c, err := schedclock.New(schedclock.Source{Name: "fast", Read: fast, Bits: 64, Rate: 1e9},
		schedclock.WithReference(reference))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	time.Sleep(300 * time.Millisecond) // past the first refinements
	in := c.Info()
	fmt.Println(in.RateOrigin, in.Rate > 1_000_010_000, in.Watch.Reanchors)
}

// Register switches counters without a jump: the new counter takes over
// from the value the old one reached.
func ExampleClock_Register() {
	slow, _ := schedclocktest.NewManual(1000, 64) // 1 kHz
	fine, _ := schedclocktest.NewManual(1e9, 64)  // 1 GHz
	c, _ := schedclock.New(slow.Source())
	defer c.Close()
	slow.Advance(7 * time.Millisecond)
	fmt.Println(c.Now())
	if err := c.Register(fine.Source()); err != nil {
		panic(err)
	}
	fine.Advance(250 * time.Nanosecond)
	fmt.Println(c.Now())
	// The kernel's rule: a slower counter does not replace a faster one.
	err := c.Register(slow.Source())
	fmt.Println(errors.Is(err, schedclock.ErrSlowerSource))
	// Output:
	// 7ms
	// 7.00025ms
	// true
}

// Suspend freezes a clock; the time that passes until Resume is not
// counted.
func ExampleClock_Suspend() {
	var counter atomic.Uint64
	c, _ := schedclock.New(schedclock.Source{Name: "c", Read: counter.Load, Bits: 64, Rate: 1_000_000_000})
	defer c.Close()
	counter.Store(1000)
	c.Suspend()
	counter.Store(5000) // time passing while suspended is not counted
	fmt.Println(c.Now())
	c.Resume()
	counter.Add(10)
	fmt.Println(c.Now())
	// Output:
	// 1µs
	// 1.01µs
}

// Info says what a clock runs on and why; for the default clock, also
// what its trust checks found.
func ExampleClock_Info() {
	in := schedclock.Default().Info()
	fmt.Println(in.Source != "", in.Rate > 0)
	var ev schedclock.Evidence = in.Evidence // the kernel's word, the cross-CPU check, ...
	fmt.Println(ev.Rejected == "" || in.Source == "portable")
	// Output:
	// true true
	// true
}

// Coarse is one call and three loads: for rate limiters, caches and
// timeouts that need the time only to the millisecond.
func ExampleCoarse() {
	deadline := schedclock.Coarse().Add(50 * time.Millisecond)
	expired := func() bool { return schedclock.Coarse() >= deadline }
	fmt.Println(expired())
	// Output: false
}

// A Clock's coarse resolution is set when it is made: here 10 ms, for a
// cache that expires entries to the second.
func ExampleWithCoarseResolution() {
	c, err := schedclock.New(schedclock.Portable(), schedclock.WithCoarseResolution(10*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	expires := c.Coarse().Add(time.Minute)
	fmt.Println(c.Coarse() < expires, c.Coarse() <= c.Now())
	// Output: true true
}

// Default is the clock Now, Since, Coarse and WallNow read: its Info says
// which counter it runs on, and why.
func ExampleDefault() {
	c := schedclock.Default()
	in := c.Info()
	fmt.Println(in.Source != "", c.Since(c.Now()) >= 0)
	// Output: true true
}

// Instants subtract with Sub (a time.Duration, negative when the other
// is later: a-b would be an Instant), move with Add, both saturating
// rather than wrapping, compare with Before and After (or < and >), and
// print as the time since their clock's start.
func ExampleInstant() {
	start := schedclock.Instant(1_000)
	later := start.Add(1500 * time.Microsecond)
	fmt.Println(later.Sub(start), start.Sub(later), later.After(start), start.Before(later))
	fmt.Println(schedclock.Instant(math.MaxInt64).Add(time.Hour) == math.MaxInt64)
	fmt.Printf("%v %s\n", later, schedclock.Instant(1_234_567_891))
	// Output:
	// 1.5ms -1.5ms true true
	// true
	// 1.501ms 1.234567891s
}

// Hardware is this machine's counter register; where there is none, or
// it cannot be trusted, the error says why and Portable works
// everywhere. Raw, CLOCK_MONOTONIC_RAW, is the reference the default
// clock refines its rate against.
func ExampleHardware() {
	src, err := schedclock.Hardware()
	if errors.Is(err, schedclock.ErrUnsupported) {
		if src, err = schedclock.Paravirt(); err != nil {
			src = schedclock.Portable()
		}
	}
	raw, err := schedclock.Raw()
	if err != nil {
		panic(err)
	}
	c, err := schedclock.New(src, schedclock.WithReference(func() int64 { return int64(raw.Read()) }))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	fmt.Println("on", c.Info().Source)
}

// Boottime counts the time the system spent suspended, for leases that
// must expire across a sleep; KernelTime maps a reading onto a kernel
// clock, for joining spans with perf or BPF events.
func ExampleBoottime() {
	src, err := schedclock.Boottime()
	if err != nil {
		panic(err)
	}
	lease, err := schedclock.New(src)
	if err != nil {
		panic(err)
	}
	defer lease.Close()
	expires := lease.Now().Add(30 * time.Second)
	if mono, ok := schedclock.Default().KernelTime(schedclock.KernelMonotonic, schedclock.Now()); ok {
		fmt.Println("CLOCK_MONOTONIC", mono)
	}
	fmt.Println(lease.Now() < expires)
}

// A closed clock keeps answering Now but refuses its writer calls.
func ExampleClock_Close() {
	c, err := schedclock.New(schedclock.Portable())
	if err != nil {
		panic(err)
	}
	c.Close()
	fmt.Println(errors.Is(c.Update(), schedclock.ErrClosed), c.Now() > 0)
	// Output: true true
}

// WallNow is time.Now without its monotonic reading, read from the
// counter; WallTime maps any reading to the wall clock.
func ExampleWallNow() {
	start := schedclock.Now()
	when := schedclock.Default().WallTime(start)
	fmt.Println(time.Since(when) < time.Second, schedclock.WallNow().Year() >= 2026)
	// Output: true true
}

// Logging with log/slog: slog.Logger reads time.Now for every record
// itself, so a Handler that re-stamps records with WallNow adds a clock
// read and makes logging slower (5-7% a line, measured in
// examples/integrations). Where the stamp must be the counter's wall
// time, build the record with it: one clock read per line, as with
// time.Now. For plain slog use, schedclock has nothing to add.
func ExampleWallNow_slog() {
	handler := slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey { // times differ from run to run
				return slog.Bool("stamped", !a.Value.Time().IsZero())
			}
			return a
		},
	})
	start := schedclock.Now()
	r := slog.NewRecord(schedclock.WallNow(), slog.LevelInfo, "request served", 0)
	r.AddAttrs(slog.Bool("fast", schedclock.Since(start) < time.Second))
	_ = handler.Handle(context.Background(), r)
	// Output: stamped=true level=INFO msg="request served" fast=true
}
