package schedclock_test

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/internal/kernel"
)

var (
	sink         int64
	parallelSink atomic.Int64
)

// The benchmarks of the public API, a cross-cutting suite: the readers
// (now.go, coarse.go, wall.go, the sources of source.go) and the writer (schedclock.go's Update, switch.go's
// Register). The hardware counter's own are in counter_test.go.
//
// Benchmarks of the read path: compare them within one run (make bench)
// and quote the CPU. Each has a RunParallel twin: with every P reading,
// the per-read cost should be the single-goroutine cost divided by
// GOMAXPROCS, since readers write no shared memory
// (TestReadersWriteNothing).

func bench[T ~int64](b *testing.B, serial func(b *testing.B), read func() T) {
	b.Run("serial", serial)
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			var s int64
			for pb.Next() {
				s += int64(read())
			}
			parallelSink.Add(s)
		})
	})
}

// The serial loops call the clock directly, not through a func value:
// the call itself is part of what a caller pays, an indirect call is not.

// The default clock (the TSC or CNTVCT where trusted, else the portable
// source; the benchmark's name does not say which: the log does).
func BenchmarkNow(b *testing.B) {
	b.Logf("default clock on %s", schedclock.Default().Info().Source)
	bench(b, func(b *testing.B) {
		var s schedclock.Instant
		for b.Loop() {
			s += schedclock.Now()
		}
		sink += int64(s)
	}, schedclock.Now)
}

func BenchmarkCoarse(b *testing.B) {
	schedclock.Coarse()
	bench(b, func(b *testing.B) {
		var s schedclock.Instant
		for b.Loop() {
			s += schedclock.Coarse()
		}
		sink += int64(s)
	}, schedclock.Coarse)
}

func BenchmarkSince(b *testing.B) {
	start := schedclock.Now()
	bench(b, func(b *testing.B) {
		var s time.Duration
		for b.Loop() {
			s += schedclock.Since(start)
		}
		sink += int64(s)
	}, func() int64 { return int64(schedclock.Since(start)) })
}

// The standard library and the kernel, for comparison.
func BenchmarkTimeSince(b *testing.B) {
	start := time.Now()
	bench(b, func(b *testing.B) {
		var s time.Duration
		for b.Loop() {
			s += time.Since(start)
		}
		sink += int64(s)
	}, func() int64 { return int64(time.Since(start)) })
}

func BenchmarkTimeNow(b *testing.B) {
	bench(b, func(b *testing.B) {
		var s int
		for b.Loop() {
			s += time.Now().Nanosecond()
		}
		sink += int64(s)
	}, func() int64 { return int64(time.Now().Nanosecond()) })
}

func BenchmarkWallNow(b *testing.B) {
	schedclock.WallNow()
	bench(b, func(b *testing.B) {
		var s int
		for b.Loop() {
			s += schedclock.WallNow().Nanosecond()
		}
		sink += int64(s)
	}, func() int64 { return int64(schedclock.WallNow().Nanosecond()) })
}

// BoundedWallNow is WallNow with its error bound: against
// BenchmarkWallNow in the same run, what the bound costs (at most 1.5x).
func BenchmarkBoundedWallNow(b *testing.B) {
	schedclock.BoundedWallNow()
	bench(b, func(b *testing.B) {
		var s int
		for b.Loop() {
			s += schedclock.BoundedWallNow().Latest().Nanosecond()
		}
		sink += int64(s)
	}, func() int64 { return int64(schedclock.BoundedWallNow().Latest().Nanosecond()) })
}

// Clock.Now on each portable source.
// BenchmarkKernelTime is Now mapped onto CLOCK_MONOTONIC: against
// BenchmarkNow, what the map costs (a load and a multiply-add).
func BenchmarkKernelTime(b *testing.B) {
	c := schedclock.Default()
	c.KernelTime(schedclock.KernelMonotonic, c.Now())
	bench(b, func(b *testing.B) {
		var s int64
		for b.Loop() {
			kt, _ := c.KernelTime(schedclock.KernelMonotonic, c.Now())
			s += kt
		}
		sink += s
	}, func() int64 { kt, _ := c.KernelTime(schedclock.KernelMonotonic, c.Now()); return kt })
}

// BenchmarkFromKernelTime reverses a kernel time (KernelTime's search):
// of a reading just taken (now), and of one taken when the benchmark
// started (old: older than the kernel's last update, so each KernelTime
// of the search takes its slower path).
func BenchmarkFromKernelTime(b *testing.B) {
	c := schedclock.Default()
	if _, ok := c.KernelTime(schedclock.KernelMonotonic, c.Now()); !ok {
		b.Skip("no kernel clocks here")
	}
	var s schedclock.Instant
	b.Run("now", func(b *testing.B) {
		for b.Loop() {
			kt, _ := c.KernelTime(schedclock.KernelMonotonic, c.Now())
			r, _ := c.FromKernelTime(schedclock.KernelMonotonic, kt)
			s += r
		}
	})
	b.Run("old", func(b *testing.B) {
		kt, _ := c.KernelTime(schedclock.KernelMonotonic, c.Now())
		for b.Loop() {
			r, _ := c.FromKernelTime(schedclock.KernelMonotonic, kt)
			s += r
		}
	})
	sink += int64(s)
}

func BenchmarkPortable(b *testing.B) {
	c, err := schedclock.New(schedclock.Portable())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	benchClock(b, c)
}

// benchClock benchmarks c.Now.
func benchClock(b *testing.B, c *schedclock.Clock) {
	bench(b, func(b *testing.B) {
		var s schedclock.Instant
		for b.Loop() {
			s += c.Now()
		}
		sink += int64(s)
	}, c.Now)
}

func BenchmarkJiffies(b *testing.B) {
	j, err := schedclock.NewJiffies(1000)
	if err != nil {
		b.Fatal(err)
	}
	defer j.Stop()
	c, err := schedclock.New(j.Source())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	benchClock(b, c)
}

// Now while another goroutine folds the clock 10,000 times a second: the
// latch's update window, against the same clock left alone.
func BenchmarkNowUnderUpdates(b *testing.B) {
	for _, rate := range []int{0, 10_000} {
		name := "idle"
		if rate != 0 {
			name = "10kHz"
		}
		b.Run(name, func(b *testing.B) {
			c, err := schedclock.New(schedclock.Portable())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			stop := make(chan struct{})
			done := make(chan struct{})
			if rate != 0 {
				go func() {
					defer close(done)
					ticker := time.NewTicker(time.Second / time.Duration(rate))
					defer ticker.Stop()
					for {
						select {
						case <-stop:
							return
						case <-ticker.C:
							c.Update()
						}
					}
				}()
			} else {
				close(done)
			}
			var s schedclock.Instant
			for b.Loop() {
				s += c.Now()
			}
			sink += int64(s)
			close(stop)
			<-done
		})
	}
}

// The writer's side.
func BenchmarkWriter(b *testing.B) {
	f := &schedclock.FakeCounter{}
	c, err := schedclock.New(f.Source("fake", 64, 1e9))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.Run("Update", func(b *testing.B) {
		for b.Loop() {
			f.Add(1000)
			c.Update()
		}
	})
	b.Run("Register", func(b *testing.B) {
		g := &schedclock.FakeCounter{}
		src := g.Source("g", 64, 1e9)
		for b.Loop() {
			g.Add(1000)
			if err := c.Register(src); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("RegisterAnotherCounter", func(b *testing.B) {
		srcs := [2]schedclock.Source{}
		for i := range srcs {
			g := &schedclock.FakeCounter{}
			srcs[i] = g.Source("g", 64, 1e9)
		}
		i := 0
		for b.Loop() {
			i++
			if err := c.Register(srcs[i%2]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("SuspendResume", func(b *testing.B) {
		for b.Loop() {
			c.Suspend()
			c.Resume()
		}
	})
}

// CLOCK_MONOTONIC_RAW through golang.org/x/sys/unix: on Linux
// unix.ClockGettime is a system call, not the vDSO (Go exposes no vDSO
// call for other clocks than the runtime's), so this is what reading the
// raw clock costs a Go program.
func BenchmarkClockGettimeRaw(b *testing.B) {
	if !kernel.HasMonotonicRaw {
		b.Skip("no CLOCK_MONOTONIC_RAW on ", runtime.GOOS)
	}
	raw := func() int64 {
		ns, _ := kernel.MonotonicRaw()
		return ns
	}
	bench(b, func(b *testing.B) {
		var s int64
		for b.Loop() {
			s += raw()
		}
		sink += s
	}, raw)
}

// BenchmarkRaw and BenchmarkBoottime read the vDSO-backed Sources (Raw,
// Boottime); compare them with BenchmarkTimeSince and
// BenchmarkClockGettimeRaw (the system call) in one run.
func BenchmarkRaw(b *testing.B)      { benchSource(b, schedclock.Raw) }
func BenchmarkBoottime(b *testing.B) { benchSource(b, schedclock.Boottime) }

func benchSource(b *testing.B, mk func() (schedclock.Source, error)) {
	src, err := mk()
	if err != nil {
		b.Skip(err)
	}
	b.Log(src.Name)
	read := src.Read
	bench(b, func(b *testing.B) {
		var s uint64
		for b.Loop() {
			s += read()
		}
		sink += int64(s)
	}, func() int64 { return int64(read()) })
}
