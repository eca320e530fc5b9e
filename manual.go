package schedclock

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Manual is a counter that moves only when told to: the way to test code
// that takes a *Clock. Make a Clock on its Source, hand the Clock to the
// code under test, and Advance the counter:
//
//	m := schedclock.NewManual(1_000_000_000, 64)
//	c, err := schedclock.New(m.Source())
//	...
//	m.Advance(1500 * time.Millisecond) // c.Now() is now 1.5e9 ns later
//
// A Clock on a Manual counter runs like any other (its goroutine folds
// the counter), but time passes for it only through Advance and Set, so
// tests are exact and need not sleep. A Manual is safe for concurrent
// use. It is also what to use inside a testing/synctest bubble: Now
// follows the machine's counter, not the bubble's fake time (see the
// package documentation).
type Manual struct {
	value atomic.Uint64
	carry atomic.Uint64 // Advance's remainder, in 1/1e9 counts
	rate  uint64
	bits  int
}

// NewManual returns a counter at 0 that counts at rate Hz when advanced,
// bits wide. New and Register check rate and bits as for any Source (a
// rate of 0 or a width outside 1..64 is refused with ErrInvalidSource).
func NewManual(rate uint64, bits int) *Manual {
	return &Manual{rate: rate, bits: bits}
}

// Advance moves the counter on by d: d times its rate, in counts, the
// fractions of a count carried to the next Advance. A negative d does
// nothing (use Set to move the counter back).
func (m *Manual) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	for {
		carry := m.carry.Load()
		hi, lo := bits.Mul64(uint64(d), m.rate)
		lo, c := bits.Add64(lo, carry, 0)
		hi += c
		if hi >= uint64(time.Second) {
			hi = uint64(time.Second) - 1 // centuries at any rate: saturate
		}
		counts, rem := bits.Div64(hi, lo, uint64(time.Second))
		if m.carry.CompareAndSwap(carry, rem) {
			m.value.Add(counts)
			return
		}
	}
}

// Set sets the counter to v (masked to its width when read): a counter
// that jumps, steps back or wraps.
func (m *Manual) Set(v uint64) { m.value.Store(v) }

// Read returns the counter, masked to its width.
func (m *Manual) Read() uint64 {
	v := m.value.Load()
	if m.bits >= 1 && m.bits < 64 {
		v &= 1<<uint(m.bits) - 1
	}
	return v
}

// Source returns the counter as a Source named "manual".
func (m *Manual) Source() Source {
	return Source{Name: "manual", Read: m.Read, Bits: m.bits, Rate: m.rate}
}
