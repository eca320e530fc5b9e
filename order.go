package schedclock

import "sync/atomic"

// orderSink is what orderAfter loads: it is never written, so every core
// keeps it in its cache.
var orderSink [2]atomic.Uint64

// orderAfter returns once v is known, through a load whose address depends
// on v, so that the caller's later loads (a latch's seq re-check) cannot be
// satisfied before the counter read that produced v: a load cannot be
// issued before its address is known, x86 keeps later loads after it
// (Intel SDM Vol. 3A 9.2.2, "Reads are not reordered with other reads"),
// and on arm64 it is an acquire (LDAR), which orders every later load
// after it. v>>63 is 0 for every value it is given (nanoseconds since
// the package started), but neither the compiler nor the CPU can know
// that before v. The hardware counters' readers do the same in assembly;
// the portable source, which reads the clock through the Go runtime, uses
// this, in every build (purego included).
func orderAfter(v uint64) {
	orderSink[v>>63].Load()
}
