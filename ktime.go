package schedclock

import (
	"math"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/schedclock/schedclock/internal/format"
	"github.com/schedclock/schedclock/internal/hwcounter"
	"github.com/schedclock/schedclock/internal/perfclock"
	"github.com/schedclock/schedclock/internal/pvclock"
	"github.com/schedclock/schedclock/internal/vdso"
)

// KernelClock names a clock of the Linux kernel that tracers stamp
// their events with, for KernelTime. Its values are the kernel's clock
// ids, and -1 for perf's own clock.
type KernelClock int

const (
	// KernelMonotonic is CLOCK_MONOTONIC: perf record -k
	// CLOCK_MONOTONIC, BPF's bpf_ktime_get_ns, ftrace's mono clock.
	KernelMonotonic KernelClock = 1
	// KernelBoottime is CLOCK_BOOTTIME, CLOCK_MONOTONIC plus the time
	// spent suspended: bpf_ktime_get_boot_ns, ftrace's boot clock.
	KernelBoottime KernelClock = 7
	// KernelPerf is perf's default clock (the kernel's sched_clock), a
	// plain perf record's, where the kernel exports it to user space
	// (cap_user_time_zero in a perf event's page: x86 bare metal whose
	// sched_clock is the TSC, arm64; not a KVM guest, whose sched_clock
	// is kvm-clock's whichever clocksource its kernel runs on).
	KernelPerf KernelClock = -1
)

// KernelTime maps the clock's reading t (an Instant its Now returned) onto
// the kernel clock k: the nanoseconds clock_gettime(k) would have
// returned at the instant of the reading. ok is false where k cannot be
// read here (not Linux, perf's clock not exported, an unknown k), and
// on clocks whose readings are not real time (schedclocktest.Manual, Bubble).
//
// A later reading never maps earlier, on any goroutine, through every
// update, slew and switch of clocksource the kernel makes. Where the
// clock reads a counter the kernel's vDSO converts (the pvclock page on
// a kvm-clock guest, the TSC on a TSC kernel, either on a KVM guest
// whichever of the two the kernel runs on: the page's scale relates
// them), KernelMonotonic and KernelBoottime are exact: the kernel's own
// conversion, from the vDSO's time data, of the counter value the
// reading was taken at (on the portable source, whose counter is
// CLOCK_MONOTONIC itself, no conversion at all), with the conversion
// that was the kernel's then. The process keeps the last 256
// conversions it saw (a KernelTime during an update's tick sees it): a
// reading mapped within 256 kernel updates of being taken (a second at
// HZ=250) maps to the same kernel time at once and later, where
// KernelTime was called in each of them (where it was not, to within
// what the conversions missed moved: a ns or two for NTP's
// corrections), but for a reading taken in the microseconds between the
// kernel's read of the counter for an update and the update's
// publication: mapped at once through the conversion before it, later
// through the update's own, a few ns apart after a change of frequency.
//
// Elsewhere, and for older readings, a map paired with the kernel clock
// (its vDSO clock_gettime, or perf's page and the counter) answers:
// paired every 100 ms while KernelTime is called (every 1-3 s when
// idle), as WallTime's with the wall clock (no step back: the map slews
// back at 0.1% where it was ahead), so it follows NTP's slew and, for
// KernelBoottime, a suspend. A reading mapped again through it after it
// mapped exactly may differ by up to the map's bound, and one taken on a
// segment that a later pairing found off stays off by that much.
// Info.KernelTime says how closely, before a mapping needs it: exact,
// and the ±bound of the paired map (for the readings the exact path
// leaves to it, or for all): half its pairing's bracket, the most a
// pairing found it off, and what a change of the kernel's frequency of
// up to 1000 ppm (adjtimex's whole range) adds before the next pairing
// corrects it (110 µs while KernelTime is called, 3 ms when idle). The
// first call answers at once from one pairing by the system call and
// has the clock's goroutine refine the map.
//
// While a clock switches counters (Register, a re-anchoring, the default
// clock's set-up and its fall-back) Now stands still for microseconds,
// and the readings it returns then map to the instant the switch began;
// readings taken before a switch map as they did then. The default
// clock's first KernelTime makes its choice of counter, and the switch
// to it, before it answers (a few ms at most: probes, file reads), so a
// program that maps its readings from its very first one finds every
// later reading on the counter's line. What remains: readings taken
// before the first KernelTime while the set-up runs (it starts 10 ms
// after the first use), and where the counter's adoption waits (a rate
// to measure: 20 ms; a cross-CPU check that must pass first), the switch
// that adoption makes later.
//
// It costs at most half a Now more than Now (while the kernel runs on
// the other of the TSC and the pvclock page, until the default clock
// follows it, a few hundred ns: each mapping looks its conversion up in
// the history), and allocates nothing. The default clock's first
// KernelTime takes the choice and the switch: 0.4-1.1 ms on the KVM
// guest this was measured on.
// Readings before the clock's start map through its first segment; the
// result saturates to the int64 range.
func (c *Clock) KernelTime(k KernelClock, t Instant) (int64, bool) {
	ns := int64(t)
	c = c.orDefault()
	i := kernelIndex(k)
	if i < 0 {
		return 0, false
	}
	if !c.st.kernel.on.Load() {
		if c.notRealTime() {
			return 0, false
		}
		c.useKernelMaps()
	}
	r := &c.st.kernel.maps[i]
	// The exact path first: a line on a kernel counter is real time (a
	// Manual's or a Bubble's line reads another counter).
	if k := kernelConvsOn.Load(); k != nil && i < len(pvclock.Conv{}.Base) {
		switch kt, how := c.exactKernelTime(k, i, ns); how {
		case kernelExact:
			if !r.used.Load() {
				c.keepMap(r)
			}
			return kt, true
		case kernelBounded:
			return min(c.mapAt(r, ns), kt), true
		}
	}
	if c.notRealTime() || r.m.Load() == nil && !kernelRefs[i].available() {
		return 0, false
	}
	return c.mapAt(r, ns), true
}

// FromKernelTime is KernelTime's reverse: the least reading of c that
// KernelTime maps to kt or later on the kernel clock k, the Instant Now
// returned when clock_gettime(k) read kt (to the ns the two clocks
// round to), so that a kernel event's stamp (perf's, BPF's, ftrace's)
// can be placed among the clock's readings. KernelTime(k, t) >= kt and
// KernelTime(k, t-1) < kt.
//
// ok is false where KernelTime's is, and where kt is not after the
// kernel time of the clock's first reading (Instant 0) or maps past the
// last Instant. It searches KernelTime, which is monotonic in the
// reading, from the guess that kt was as far from now as the clock is:
// about a dozen KernelTimes, never a system call once the map is made
// (BenchmarkFromKernelTime measures a reading just taken and one older
// than the kernel's last update).
func (c *Clock) FromKernelTime(k KernelClock, kt int64) (Instant, bool) {
	c = c.orDefault()
	now := c.Now()
	at, ok := c.KernelTime(k, now)
	if !ok {
		return 0, false
	}
	kernelAt := func(t Instant) int64 { v, _ := c.KernelTime(k, t); return v }
	guess := max(now.Add(Instant(kt).Sub(Instant(at))), 0)
	// lo and hi bracket the answer: kernelAt(lo) < kt <= kernelAt(hi).
	lo, hi := guess, guess
	for step := time.Microsecond; ; step *= 2 {
		if lo = max(guess.Add(-step), 0); kernelAt(lo) < kt {
			break
		}
		if hi = lo; lo == 0 {
			return 0, false // at or before the clock's first reading
		}
	}
	for step := time.Microsecond; kernelAt(hi) < kt; step *= 2 {
		if hi == math.MaxInt64 {
			return 0, false
		}
		if lo, hi = hi, guess.Add(step); step > math.MaxInt64/2 {
			hi = math.MaxInt64
		}
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if kernelAt(mid) < kt {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi, true
}

// notRealTime says the clock's readings are not real time: a Manual
// counter's, a Bubble's.
func (c *Clock) notRealTime() bool {
	return c.st.exact.manual.Load() != nil || c.st.exact.wallOrigin.Load() != nil
}

// keepMap has the paired map r made and kept fresh, as a mapping through
// it would, for the readings the exact path leaves to it and for Info.
//
//go:noinline
func (c *Clock) keepMap(r *pairedMap) {
	if r.m.Load() == nil {
		c.startMap(r)
	}
	c.markUsed(r)
}

// kernelIndex is k's place in kernelRefs, -1 for none.
func kernelIndex(k KernelClock) int {
	switch k {
	case KernelMonotonic:
		return 0
	case KernelBoottime:
		return 1
	case KernelPerf:
		return 2
	}
	return -1
}

// kernelRef is a kernel clock as the kernel maps read it.
type kernelRef struct {
	clock     KernelClock
	name      string
	ref       refClock
	available func() bool // whether the clock can be read here
}

// kernelRefs are the kernel clocks KernelTime maps to; their order is
// that of clockState.kernel.maps.
var kernelRefs = [...]kernelRef{
	{KernelMonotonic, "CLOCK_MONOTONIC", refClock{read: monotonicNow, quick: monotonicQuick}, kernelClocksHere},
	{KernelBoottime, "CLOCK_BOOTTIME", refClock{read: boottimeNow, quick: boottimeQuick}, kernelClocksHere},
	{KernelPerf, "perf", refClock{read: perfNow, quick: perfNow}, perfAvailable},
}

var monotonicReader, boottimeReader = vdsoReader{id: vdso.Monotonic}, vdsoReader{id: vdso.Boottime}

func monotonicNow() int64   { return monotonicReader.now() }
func monotonicQuick() int64 { return monotonicReader.quick() }
func boottimeNow() int64    { return boottimeReader.now() }
func boottimeQuick() int64  { return boottimeReader.quick() }

// now reads the clock through the vDSO, looked up at the first call.
func (v *vdsoReader) now() int64 {
	if c := v.open(); c != nil {
		return c.Now()
	}
	return v.quick()
}

// quick reads the clock without waiting for a lookup: the vDSO once it
// is known, the system call until then.
func (v *vdsoReader) quick() int64 {
	if c := v.resolved.Load(); c != nil {
		return c.Now()
	}
	ns, _ := vdso.Syscall(v.id)
	return ns
}

// perfPage is perf's page and the counter it converts, opened at the
// first KernelTime(KernelPerf); its conversion is nil where the kernel
// does not export perf's clock, and why says why.
var perfPage = lazy[*perfClock]{make: openPerfClock}

type perfClock struct {
	page *perfclock.Page
	read func() uint64 // the counter perf's clock converts
	why  string
}

// perfOpened says perfPage was opened, and its why is final.
var perfOpened atomic.Bool

func openPerfClock() *perfClock {
	defer perfOpened.Store(true)
	p := &perfClock{read: hwcounter.TSC()}
	if p.read == nil {
		p.read = hwcounter.CNTVCT()
	}
	if p.read == nil {
		p.why = "no counter perf's page converts in this build"
		return p
	}
	page, err := perfclock.Open()
	if err == nil {
		_, err = page.Read()
	}
	if err != nil {
		p.why, p.read = err.Error(), nil
		return p
	}
	p.page = page
	return p
}

func perfAvailable() bool { return perfPage.get().read != nil }

// perfNow reads perf's clock: the counter through the page's current
// conversion (read under the page's lock first, so that the counter is
// not older than it).
func perfNow() int64 {
	p := perfPage.get()
	conv, err := p.page.Read()
	if err != nil {
		return 0
	}
	return int64(conv.Time(p.read()))
}

// kernelMaps are the clock's maps onto kernelRefs' clocks, each made at
// its first KernelTime.
type kernelMaps [len(kernelRefs)]pairedMap

// useKernelMaps gives the clock's kernel maps their references and has
// the background goroutine keep them fresh.
func (c *Clock) useKernelMaps() {
	// The default clock's set-up now, not a grace after, and its
	// hardware choice made before the first answer: its switch to the
	// hardware's counter stands Now still for microseconds, and the
	// readings taken meanwhile cannot say when in the switch they were
	// taken. A program that maps onto the kernel's clocks from its first
	// reading has the switch behind it, between its first reading and
	// its second.
	c.st.policy.startSetUp()
	if p := c.st.policy; p != nil && p.first.deferred && p.started() && !inSynctestBubble() {
		c.chooseHardware() // made already (the set-up's goroutine was first): returns at once
	}
	if k := kernelConvsOnce.get(); k != nil { // reads /proc/self/maps: not under the lock
		kernelConvsOn.CompareAndSwap(nil, k)
	}
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	if c.st.kernel.tick != nil {
		return
	}
	for i := range c.st.kernel.maps {
		c.st.kernel.maps[i].ref, c.st.kernel.maps[i].monotone = kernelRefs[i].ref, true
	}
	c.st.kernel.tick = (*Clock).tickKernelMapsLocked
	c.st.kernel.on.Store(true)
}

// tickKernelMapsLocked is the background goroutine's work on the kernel
// maps at now; it returns when they are next due, or next if earlier.
func (c *Clock) tickKernelMapsLocked(now, next time.Time) time.Time {
	for i := range c.st.kernel.maps {
		r := &c.st.kernel.maps[i]
		if r.dueLocked(now) {
			c.tickLocked(r, now)
			c.st.kernel.info = c.describeKernelMapsLocked()
		}
		if !r.due.IsZero() && r.due.Before(next) {
			next = r.due
		}
	}
	return next
}

// describeKernelMapsLocked is Info.KernelTime: for each kernel clock,
// how its map is paired and how closely it followed, or why there is
// none.
func (c *Clock) describeKernelMapsLocked() string {
	var b strings.Builder
	for i, k := range kernelRefs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(k.name)
		b.WriteString(": ")
		r := &c.st.kernel.maps[i]
		switch {
		case k.clock == KernelPerf && perfOpened.Load() && !perfAvailable():
			b.WriteString("not exported here (" + perfPage.get().why + ")")
		case k.clock != KernelPerf && !kernelClocksHere():
			b.WriteString("not on this system")
		case r.m.Load() == nil:
			b.WriteString("not mapped yet (at the first KernelTime)")
		case r.bracket == 0:
			b.WriteString("provisional (one pairing by the system call)")
		default:
			if exact := c.exactKernelLocked(i); exact != "" {
				b.WriteString(exact)
				b.WriteString("; older readings ")
			}
			b.WriteString(format.Sprintf("±%v (pairing bracket %v, worst drift found %v, and %v for a change of the kernel's frequency of up to %d ppm until the next pairing)",
				r.kernelBound(), time.Duration(r.bracket), time.Duration(r.drift), r.kernelSlewAllowance(), kernelFreqChange))
		}
	}
	return b.String()
}

// kernelBound is how far the paired map r of a kernel clock may be
// from it, stated before a reading needs it: half the last pairing's
// bracket; the worst drift a pairing found, which goes on growing for
// wallLead before the new segment corrects it, at the pace it grew over
// the period; and what a change of the kernel's frequency can add
// before the next pairing re-aims the map (the map keeps its pace until
// then: a period and a segment's lead while KernelTime is called, the
// idle pace's 3 s otherwise), kernelFreqChange at most. Without that
// last term the bound stated was the drift found so far: 35 ns, then
// 110 µs off for 110 ms after an adjtimex slew of 1000 ppm.
func (r *pairedMap) kernelBound() time.Duration {
	return time.Duration(r.bracket/2+r.drift+r.drift*int64(wallLead)/int64(wallPeriod)) + r.kernelSlewAllowance()
}

// kernelSlewAllowance is kernelBound's term for a change of the kernel's
// frequency.
func (r *pairedMap) kernelSlewAllowance() time.Duration {
	lag := wallPeriod + wallLead
	if r.slow {
		lag = wallIdlePeriod*3/2 + wallLead
	}
	return lag / 1_000_000 * kernelFreqChange
}

// kernelFreqChange is the largest change of the kernel's frequency, in
// ppm, that the paired maps' stated bound allows for: from -500 to +500
// ppm, adjtimex's whole range for ADJ_FREQUENCY (MAXFREQ), and adjtime's
// slew (500 ppm). A faster slew (ADJ_TICK's, or the PLL taking up a
// large offset) is followed within the same 110 ms, by more.
const kernelFreqChange = 1000

// kernelClocksHere says the kernel's monotonic and boot clocks are
// Linux's, which its tracers stamp with: KernelTime maps onto Linux's
// trace clocks only.
func kernelClocksHere() bool { return runtime.GOOS == "linux" }

// kernelUnmapped is Info.KernelTime before any KernelTime, or, off
// Linux, for ever.
func kernelUnmapped() string {
	if kernelClocksHere() {
		return "not mapped yet (at the first KernelTime)"
	}
	return "not on this system: KernelTime maps onto Linux's clocks"
}
