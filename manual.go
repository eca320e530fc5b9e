package schedclock

import (
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schedclock/schedclock/internal/testhook"
)

// manual is a counter that moves only when told to, for tests: package
// schedclocktest exports it (as Manual, through internal/testhook) with
// its documentation. It lives here because a Clock on it answers exactly:
// the Clock recognises it (Source.manual) and answers Coarse with Now and
// WallTime from the counter's wall origin, and Advance folds every Clock
// on a narrow counter across the move under the Clocks' writer locks.
//
// A nil *manual panics in no method: Read reads 0, Advance, Set and
// SetWallOrigin do nothing, and New refuses its Source with
// ErrInvalidSource.
type manual struct {
	value  atomic.Uint64
	carry  atomic.Uint64            // Advance's remainder, in 1/1e9 counts
	origin atomic.Pointer[unixTime] // the wall origin; nil: the Unix epoch
	rate   uint64
	bits   int

	// advancing serialises the Advances of a narrow counter, each of
	// which folds the clocks on it across the move (see foldAcross).
	advancing sync.Mutex
	// clocksMu guards clocks, the Clocks made on or switched to this
	// counter, held weakly: a Manual does not keep a dropped Clock alive.
	// It is taken under a Clock's writer lock (Register) and never
	// holds one, so it orders after every other lock.
	clocksMu sync.Mutex
	// Each is a clockRef: a field that names Clock would make the types
	// recursive (Clock's padding is sized with unsafe.Sizeof).
	clocks []clockRef

	// deadlinesMu guards deadlines, the contexts of Clock.WithDeadline on
	// clocks on this counter that have not ended, in the order made:
	// Advance and Set end those whose clock has reached its deadline.
	deadlinesMu sync.Mutex
	deadlines   []*pendingDeadline
}

// pendingDeadline is a context of Clock.WithDeadline on a clock on a
// manual counter, as the counter sees it: now is the clock's Now, at its
// deadline, expire ends it. Nothing here names the context's type: what
// a manual's fields reach is linked into every program that imports the
// package (Source, which holds it, is handed over as an interface), and
// a context's type would bring in time.Time's formatting (TestWeight).
type pendingDeadline struct {
	now    func() Instant
	at     Instant
	expire func()
}

// unixTime is a wall time as Unix seconds and nanoseconds: a manual
// counter's origin, held without a time.Time, whose methods (String and
// the time zone loader behind it) would otherwise be linked into every
// program that imports this package (schedclocktest gets the counter
// through an interface).
type unixTime struct{ sec, nsec int64 }

// manualWallOrigin is where a Manual's wall time starts unless
// SetWallOrigin says otherwise: a fixed instant, so that tests are
// deterministic (the same as a testing/synctest bubble's start).
var manualWallOrigin = time.Unix(946_684_800, 0).UTC() // 2000-01-01T00:00:00Z: time.Date would link the time zone loader

// newManual returns a counter at 0 that counts at rate Hz when advanced,
// bits wide. It refuses, with an error wrapping ErrInvalidSource, what
// New would refuse of its Source: a rate of 0, a width outside 1..64,
// or a counter that wraps too fast to be followed.
func newManual(rate uint64, bits int) (*manual, error) {
	m := &manual{rate: rate, bits: bits}
	if _, err := newConversion(m.Source()); err != nil {
		return nil, err
	}
	m.SetWallOrigin(manualWallOrigin)
	return m, nil
}

// SetWallOrigin sets the wall time that a Clock on this counter maps the
// reading 0 to: Time(ns) is t plus ns nanoseconds, saturated to what
// time.Unix(0, ns) can say (1677-09-21 to 2262-04-11), as every Clock's
// Time is. An origin outside that range is kept as it is, not clamped:
// Time(0) of the origin time.Time{} is the earliest time.Unix(0, ns) can
// say, and an origin in 1600 with a reading of 100 years is 1700.
func (m *manual) SetWallOrigin(t time.Time) {
	if m != nil {
		m.origin.Store(&unixTime{sec: t.Unix(), nsec: int64(t.Nanosecond())})
	}
}

// wallAt is the wall time, in Unix ns, of the clock reading ns.
func (m *manual) wallAt(ns int64) int64 {
	origin := time.Unix(0, 0)
	if o := m.origin.Load(); o != nil {
		origin = time.Unix(o.sec, o.nsec)
	}
	// time.Time holds any origin plus ±292 years without overflow: only
	// the result needs saturating.
	return unixNanoSat(origin.Add(time.Duration(ns)))
}

// unixNanoSat is t.UnixNano() saturated to the int64 range (UnixNano's
// own result is undefined outside it).
func unixNanoSat(t time.Time) int64 {
	switch {
	case t.Before(time.Unix(0, math.MinInt64)):
		return math.MinInt64
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// Advance moves the counter on by d: d times its rate, in counts, the
// fractions of a count carried to the next Advance. A negative d does
// nothing (use Set to move the counter back). It never moves the counter
// back: a 64-bit counter saturates 1/8 of its range below the top (where
// a Clock would take it for a counter that stepped back). A narrower
// counter wraps, as often as d says, and Advance folds every running
// Clock on it across the move, exactly (NewManual(1e9, 32) advanced by a
// second ten times reads 10 s later, not 10 s modulo 4.29 s): no wrap is
// ever lost, whatever the Clock's goroutine does. A Clock that is
// suspended, closed or standing still after its watch refused a reading
// (Watch.Holding) is not folded (it does not follow the counter).
func (m *manual) Advance(d time.Duration) {
	if m == nil || d <= 0 {
		return
	}
	m.advance(d)
	m.expireDeadlines()
}

// advance is Advance's move of the counter.
func (m *manual) advance(d time.Duration) {
	if !m.wide() {
		m.advancing.Lock()
		defer m.advancing.Unlock()
	}
	for {
		carry := m.carry.Load()
		counts, rem := countsFor(d, m.rate, carry)
		if m.carry.CompareAndSwap(carry, rem) {
			if m.wide() {
				m.add(counts)
			} else {
				m.foldAcross(counts)
			}
			return
		}
	}
}

// countsFor is d at rate Hz in counts, plus carry (in 1/1e9 counts), and
// what remains of a count; saturated at 2^64-1 counts.
func countsFor(d time.Duration, rate, carry uint64) (counts, rem uint64) {
	hi, lo := bits.Mul64(uint64(d), rate)
	lo, c := bits.Add64(lo, carry, 0)
	hi += c
	if hi >= uint64(time.Second) {
		return math.MaxUint64, 0
	}
	return bits.Div64(hi, lo, uint64(time.Second))
}

// attach records c, a Clock on this counter, for Advance to fold.
func (m *manual) attach(c clockRef) {
	m.clocksMu.Lock()
	defer m.clocksMu.Unlock()
	live := m.clocks[:0]
	for _, w := range m.clocks {
		if clockOf(w) != nil {
			live = append(live, w)
		}
	}
	m.clocks = append(live, c)
}

// foldAcross moves a narrow counter on by counts, any number of wraps,
// with every running Clock on it folded just before and just after, all
// under their writer locks: each then moves by exactly counts, the whole
// wraps included (the masked counter cannot show them). Readers between
// the move and the fold see at most the masked part of it, or, where
// that is in the negative zone, the fold before: never a step back.
func (m *manual) foldAcross(counts uint64) {
	m.clocksMu.Lock()
	var held []*Clock
	for _, w := range m.clocks {
		if c := clockOf(w); c != nil {
			held = append(held, c)
		}
	}
	m.clocksMu.Unlock()
	n := 0
	for _, c := range held {
		c.st.mu.Lock()
		if c.stoppedLocked() || c.st.suspended || c.st.held || c.st.exact.manual.Load() != m {
			c.st.mu.Unlock()
			continue
		}
		c.updateLocked() // the epoch is now the counter before the move
		held[n] = c
		n++
	}
	m.value.Add(counts)
	for _, c := range held[:n] {
		next := c.st.cur
		next.epochNs, next.frac = c.st.cur.atDelta(counts)
		next.epochCyc = m.Read()
		next.epochTotal = c.st.cur.epochTotal + counts
		c.publishLocked(next)
		c.st.fold.lastMono = runtimeNano()
		c.unlock()
	}
}

// wide reports whether the counter is 64 bits wide (a width outside 1..63
// reads unmasked).
func (m *manual) wide() bool { return m.bits < 1 || m.bits >= 64 }

// add moves the counter on by counts, saturating a 64-bit one below its
// negative zone (see negativeFrom).
func (m *manual) add(counts uint64) {
	if !m.wide() {
		m.value.Add(counts)
		return
	}
	top := negativeFrom(^uint64(0)) - 1
	for {
		v := m.value.Load()
		if v >= top {
			return // Set put it there: Advance does not move it back
		}
		next := v + counts
		if next < v || next > top {
			next = top
		}
		if m.value.CompareAndSwap(v, next) {
			return
		}
	}
}

// Set sets the counter to v (masked to its width when read): a counter
// that jumps, steps back or wraps.
func (m *manual) Set(v uint64) {
	if m != nil {
		m.value.Store(v)
		m.expireDeadlines()
	}
}

// addDeadline records p for Advance and Set to expire, unless its clock
// has reached its deadline already: then it returns false. The look at
// the clock comes after the record, under the lock that Advance and Set
// take after their move, so that one of the two sees a move that passes
// the deadline.
func (m *manual) addDeadline(p *pendingDeadline) bool {
	m.deadlinesMu.Lock()
	defer m.deadlinesMu.Unlock()
	if p.now() >= p.at {
		return false
	}
	m.deadlines = append(m.deadlines, p)
	return true
}

// removeDeadline forgets p, ended.
func (m *manual) removeDeadline(p *pendingDeadline) {
	m.deadlinesMu.Lock()
	defer m.deadlinesMu.Unlock()
	if i := slices.Index(m.deadlines, p); i >= 0 {
		m.deadlines = slices.Delete(m.deadlines, i, i+1)
	}
}

// expireDeadlines expires, in the order they were made, the contexts
// whose clock has reached their deadline, outside the lock: ending one
// ends its children, which may be others of the list.
func (m *manual) expireDeadlines() {
	m.deadlinesMu.Lock()
	var due []*pendingDeadline
	m.deadlines = slices.DeleteFunc(m.deadlines, func(p *pendingDeadline) bool {
		if p.now() >= p.at {
			due = append(due, p)
			return true
		}
		return false
	})
	m.deadlinesMu.Unlock()
	for _, p := range due {
		p.expire()
	}
}

// Read returns the counter, masked to its width.
func (m *manual) Read() uint64 {
	if m == nil {
		return 0
	}
	v := m.value.Load()
	if !m.wide() {
		v &= maskOf(m.bits)
	}
	return v
}

// Source returns the counter as a Source named "manual". A Clock on it
// knows it for a Manual (see Manual on Coarse and Time).
func (m *manual) Source() Source {
	if m == nil {
		return Source{Name: "manual (a nil *Manual)"} // no Read: New refuses it
	}
	return Source{Name: "manual", Read: m.Read, Bits: m.bits, Rate: m.rate, manual: m}
}

// addSat is a+b saturated to the int64 range.
func addSat(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}

// The manual counter is schedclocktest's to export: it reaches it through
// internal/testhook, so that nothing test-only is in this package's API.
// The link is a store that package initialisation makes itself
// (linkManual is inlined into it), not a function of its own to call:
// each block of code that initialisation runs first can cost a process
// a page fault or a hypervisor exit (see docs/default-clock.md).
var _ = linkManual()

func linkManual() bool {
	testhook.NewManual = newManualLink
	return true
}

func newManualLink(rate uint64, bits int) (testhook.Manual, error) {
	m, err := newManual(rate, bits)
	if err != nil {
		return nil, err
	}
	return manualLink{m}, nil
}

// manualLink is a manual counter as testhook.Manual: plain integers for
// durations and times, its Source as an any.
type manualLink struct{ m *manual }

func (l manualLink) Advance(ns int64)              { l.m.Advance(time.Duration(ns)) }
func (l manualLink) Set(v uint64)                  { l.m.Set(v) }
func (l manualLink) Read() uint64                  { return l.m.Read() }
func (l manualLink) SetWallOrigin(sec, nsec int64) { l.m.SetWallOrigin(time.Unix(sec, nsec)) }
func (l manualLink) Source() any                   { return l.m.Source() }
