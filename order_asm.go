//go:build (amd64 || arm64) && gc && !purego

package schedclock

// orderAfter returns once v is known, through a load whose address depends
// on v, so that the caller's later loads (a latch's seq re-check) cannot
// be satisfied before the counter read that produced v. The hardware
// counters' own readers do the same inline; the portable source, which
// reads the clock through the Go runtime, calls this.
//
//go:noescape
func orderAfter(v uint64)
