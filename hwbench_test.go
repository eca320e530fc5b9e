package schedclock_test

import (
	"testing"

	"github.com/schedclock/schedclock"
)

// Now on the hardware counter against the bare counter read, in one run:
// the difference is everything the latch costs.
func BenchmarkHardware(b *testing.B) {
	src, err := schedclock.TSC()
	if err != nil {
		src, err = schedclock.CNTVCT()
	}
	if err != nil {
		b.Skip("no hardware counter:", err)
	}
	c, err := schedclock.New(src)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	read := src.Read
	b.Run("bare="+src.Name, func(b *testing.B) {
		var s uint64
		for b.Loop() {
			s += read()
		}
		sink += int64(s)
	})
	b.Run("Now="+src.Name, func(b *testing.B) {
		var s int64
		for b.Loop() {
			s += c.Now()
		}
		sink += s
	})
}
