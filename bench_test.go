package schedclock_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/schedclock/schedclock"
)

var (
	sink         int64
	parallelSink atomic.Int64
)

// The default clock against the standard library. Compare them within one
// run (make bench), and quote the CPU.
func BenchmarkNow(b *testing.B) {
	for b.Loop() {
		sink += schedclock.Now()
	}
}

func BenchmarkTimeSince(b *testing.B) {
	start := time.Now()
	for b.Loop() {
		sink += int64(time.Since(start))
	}
}

func BenchmarkTimeNow(b *testing.B) {
	for b.Loop() {
		sink += int64(time.Now().Nanosecond())
	}
}

func BenchmarkNowParallel(b *testing.B) {
	b.RunParallel(func(pb *testing.PB) {
		var local int64
		for pb.Next() {
			local += schedclock.Now()
		}
		parallelSink.Add(local)
	})
}

// The portable source, where no hardware counter is used: Clock.Now on
// Go's monotonic clock against time.Since itself.
func BenchmarkPortable(b *testing.B) {
	c, err := schedclock.New(schedclock.Portable())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var s int64
	for b.Loop() {
		s += c.Now()
	}
	sink += s
}
