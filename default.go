package schedclock

import (
	"math"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/schedclock/schedclock/internal/format"
	"github.com/schedclock/schedclock/internal/hwcounter"
)

// The default clock follows the kernel's boot sequence: it starts on a
// source that is ready at once, the hardware counter wins as soon as its
// rate is known, and the rate is then refined in the background. Package
// initialisation does none of that: it publishes the portable source's
// line (static data and a handful of allocations: no file, no system
// call, no goroutine), read through a function whose first call starts
// the rest (see "The default clock's first use" below). At that first
// use, off the caller's path, a goroutine probes the hardware, chooses,
// and switches through the switch protocol (switch.go) like any
// Register, so Now never goes backwards across it, wherever the writer
// stops.
//
//   - Where the kernel runs on the hardware counter and its vDSO converts
//     it (the TSC on a TSC kernel), the clock switches to it at once and
//     converts it with the kernel's own raw conversion: nothing to
//     measure or refine.
//   - Where CPUID, the hypervisor leaf or CNTFRQ_EL0 gives the rate, the
//     clock switches to the hardware counter at once.
//   - Where the hardware counter is trusted but its rate must be measured,
//     the clock stays on the portable source and switches to the counter
//     after a 20 ms measurement against CLOCK_MONOTONIC_RAW.
//   - Where no hardware counter can be used, the clock stays on the
//     portable source and Info().Evidence.Rejected says why.
//
// CLOCK_MONOTONIC_RAW is the default clock's reference (see calibrate.go):
// the hardware counter's rate is refined against it for life, and the
// counter is watched against it. On Linux the kernel's verdict on the
// counter (and the counter's own evidence, where its descriptor has some)
// is read again every verdictPeriod: when the kernel stops using the
// counter as its clocksource (its watchdog demoted it, root switched it),
// so does the default clock, and it reads the kernel's word every
// verdictReturnPeriod to go back to the counter when the kernel does
// (trust.go).
// A caller's Register ends all of this: the caller has taken the clock
// over.
var (
	// The default clock's storage is static data, so that initialisation
	// allocates no more than its channels: the Clock in whichever slot of
	// defaultSlots is 64-byte aligned (see alignedSlot), its writer's
	// state and trust policy.
	defaultSlots  [cacheLine / 8]paddedClock
	defaultState  clockState
	defaultPolicy trustPolicy
	defaultClock  = bootDefaultClock(alignedSlot(&defaultSlots), &defaultState, &defaultPolicy, readDefaultFirstUse, counterTable())
)

// cacheLine is the alignment a Clock's latch needs (see latch).
const cacheLine = 64

// paddedClock is a Clock and 8 bytes: in an array of them, the Clocks
// start at addresses 8 bytes further from a 64-byte boundary each.
type paddedClock struct {
	Clock
	_ [8]byte
}

// alignedSlot returns the Clock of slots that starts on a 64-byte
// boundary. A heap-allocated Clock gets that from its size class
// (clockSize); static data is only aligned to 8 bytes, but of
// cacheLine/8 Clocks 8 bytes apart modulo 64, one is aligned.
func alignedSlot(slots *[cacheLine / 8]paddedClock) *Clock {
	for i := range slots {
		if uintptr(unsafe.Pointer(&slots[i].Clock))%cacheLine == 0 {
			return &slots[i].Clock
		}
	}
	panic("schedclock: no 64-byte aligned slot for the default clock")
}

// newDefaultClock returns a clock that starts as the default clock does,
// choosing among the counters of table at its first use (tests give
// tables of their own; chooseHardware makes the choice at once).
func newDefaultClock(table []*hwcounter.Counter) *Clock {
	p := new(trustPolicy)
	return bootDefaultClock(new(Clock), new(clockState), p, p.readFirstUse, table)
}

// bootDefaultClock makes c a default clock on the portable source, read
// through read (which notes the clock's uses and starts the set-up: see
// "The default clock's first use" below), with writer state st and
// policy p, which chooses among table's counters at its first use. It
// runs at package initialisation, so it reads no file, makes no system
// call and calls as little of the package's code as it can: each page of
// code it touches first costs the process a page fault (see
// docs/default-clock.md). So its first line is stored into c's bank
// directly, not published (no reader can see c yet: TestBootLine keeps
// the bank equal to a publication's), and its Info snapshot is bootInfo.
func bootDefaultClock(c *Clock, st *clockState, p *trustPolicy, read func() uint64, table []*hwcounter.Counter) *Clock {
	const rate = 1_000_000_000 // Portable's
	conv := portableConversion
	// Field by field: st is zero (a package variable, or new), and a
	// clockState literal would be built in this function's frame first,
	// growing the initialising goroutine's stack (a copy, and fresh pages
	// to fault in) in every process that imports the package.
	st.src, st.conv, st.rate, st.declared = Source{Name: "portable", Read: read, Bits: 63, Rate: rate}, conv, rating{hz: rate, origin: hwcounter.RateDeclared}, rate
	st.loop.wake, st.loop.stop, st.loop.stopped = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	st.writer.step, st.ticker.every, st.policy = noStep, defaultCoarseResolution, p
	c.st = st
	p.table, p.first.deferred, p.first.clock, p.first.read = table, true, c, read
	p.report = trustReport{pending: choicePending, kernel: kernelNotRead, crossCPU: crossCPUNotRun}
	ln := line{read: read, conv: conv, epochCyc: readMono() & conv.mask}
	st.cur, st.lines.live = ln, ln
	b := &c.latch.banks[0] // seq is 0: readers read bank 0
	b.read = funcPtr(read)
	b.epochCyc.Store(ln.epochCyc)
	b.fastMax.Store(portableFastMax)
	b.base.Store(-ln.epochCyc * uint64(conv.mult))
	b.scale.Store(packScale(conv.mult, conv.shift, 63))
	b.offset.Store(-int64(ln.epochCyc))
	st.fold.lastMono = runtimeNano()
	// fold.due is zero: the first tick folds (the portable source never
	// needs one).
	st.info.Store(&bootInfo)
	return c
}

// portableConversion is newConversion(Portable()), written out so that
// package initialisation does not run newConversion's checks and
// arithmetic (TestPortableConversion keeps it equal); portableFastMax is
// the fast path's reach on a line of it at epochNs 0, frac 0.
var portableConversion = conversion{mult: 1 << 31, shift: 31, mask: 1<<63 - 1}

const portableFastMax = 1<<33 - 1

// bootInfo is the Info of a default clock as bootDefaultClock leaves
// it, until its first writer (TestBootInfo keeps it equal to infoLocked's
// then): static data that initialisation does not write (a first write
// to a page of data costs a page fault too), shared by every such clock,
// as Info snapshots are never written once stored. Its KernelTime is
// Info's to fill in.
var bootInfo = Info{
	Source: "portable", Rate: 1_000_000_000, RateOrigin: "declared", Bits: 63,
	Mult: 1 << 31, Shift: 31, RefreshPeriod: 1<<32 - 1,
	Evidence: Evidence{Pending: choicePending, Kernel: kernelNotRead, CrossCPU: crossCPUNotRun},
}

const (
	kernelNotRead  = "not read yet: read at the clock's first use"
	crossCPUNotRun = "not run yet: it runs at the clock's first use"
)

// choicePending is Info.Evidence.Pending until the default clock has chosen its
// hardware counter.
const choicePending = "the choice of a hardware counter: it runs in the background from the clock's first use"

// evidence is what the default clock's set-up learns of its hardware
// counter before it takes the writer lock: the probes of the table's
// counters, the kernel's verdict, the counter's own evidence.
type evidence struct {
	ch            choice
	hw            Source      // as probed and prepared
	kernelConv    *kernelConv // the kernel's conversion of hw, where it runs on it
	ownCheck      func() (found string, err error)
	describe      func() string
	status        func() (reading, history string)
	kernel        string
	counterCheck  string
	vouched       bool // the kernel runs on hw
	needsEvidence bool // the kernel keeps a verdict on hw, which could not be read
	kernelTrusts  bool
}

// gatherEvidence probes table's counters and reads the evidence on the
// chosen one: a few CPUIDs (or one MRS) and a few small file reads.
//
// The hardware counter is trusted only on evidence: where the kernel
// runs on it (its clocksource is that counter), the clock switches to it
// at once; where the kernel's verdict is unknown (no sysfs), the clock
// stays on the portable source and adopts the counter only once the
// cross-CPU check has run and found no warp (retried later while it
// cannot run: one allowed CPU, GOMAXPROCS=1, a busy machine); where the
// kernel keeps no verdict on it (the arm64 generic timer), the counter's
// own check decides. Info shows each piece of evidence: Kernel, CrossCPU,
// CounterCheck, Rejected, Pending.
//
// Where the kernel runs on the counter and its vDSO converts it (the
// descriptor's VDSOMode), the clock converts with the kernel's own raw
// conversion (kernelConversion: hwcounter.RateKernel): nothing to
// measure, nothing to refine.
func gatherEvidence(table []*hwcounter.Counter, kernelConversion func(mode int32, read func() uint64) (kernelConv, error)) evidence {
	ev := evidence{ch: chooseCounter(table), kernelTrusts: true}
	ev.hw = ev.ch.src
	d := ev.ch.desc
	if d == nil {
		ev.kernel = "not read: no hardware counter"
		return ev
	}
	if d.Prepare != nil {
		hw, check := d.Prepare(counterSource(ev.hw))
		ev.hw = sourceOf(hw)
		ev.ownCheck = func() (string, error) { return check(counterMeasures()) }
	}
	ev.kernel = d.NoVerdict
	ev.status = d.Status
	if d.Describe != nil {
		ev.describe = d.Describe
		ev.counterCheck = d.Describe()
	}
	if d.Verdict != nil {
		v := d.Verdict()
		ev.kernel = v.String()
		ev.vouched = v.Known() && v.Current == v.Want
		ev.needsEvidence = !ev.vouched
		ev.kernelTrusts = ev.vouched
	}
	if ev.vouched && d.VDSOMode != 0 {
		if kc, err := kernelConversion(d.VDSOMode, ev.hw.Read); err == nil {
			ev.kernelConv = &kc
		}
	}
	return ev
}

// chooseHardware is the default clock's hardware choice: it gathers the
// evidence, then, under the writer lock, switches to the counter (rate
// known, kernel trusting), or tracks it for adoption (a rate to measure,
// a check to pass), or records why not; p.checks says whether the
// counter's background checks must run. It runs once, at the set-up;
// tests call it to make the choice at once.
func (c *Clock) chooseHardware() {
	p := c.st.policy
	if c.st.mu.Lock(); p.chosen {
		c.st.mu.Unlock()
		return
	}
	c.st.mu.Unlock()
	ev := gatherEvidence(p.table, p.kernelConversion)
	c.st.mu.Lock()
	defer c.unlock()
	if p.chosen || c.st.loop.closed {
		return
	}
	p.chosen = true
	defer c.dropFirstUseReadLocked()
	hw, err := ev.hw, ev.ch.err
	if ev.kernelConv != nil {
		hw.Rate = uint64(math.Round(ev.kernelConv.hz))
	}
	p.hw, p.ownCheck, p.describe, p.status = hw, ev.ownCheck, ev.describe, ev.status
	p.report.kernel, p.report.counterCheck = ev.kernel, ev.counterCheck
	p.vouched, p.needsEvidence = ev.vouched, ev.needsEvidence
	p.report.pending = ""
	p.report.crossCPU = "not run: no hardware counter to check"
	switch {
	case err != nil:
		p.report.rejected = err.Error()
		return
	case p.takenOver != "":
		p.report.rejected = format.Sprintf("%s: not adopted: Register(%q) took the clock over first", hw.Name, p.takenOver)
		return
	case hw.Rate == 0 || !ev.kernelTrusts:
		c.st.track = &tracker{ref: rawNow, src: hw, endsOnRegister: true, restart: true}
		if !ev.kernelTrusts {
			p.report.rejected = format.Sprintf("%s: not trusted yet: %s, and the cross-CPU check has not passed", hw.Name, p.report.kernel)
			p.report.pending = "the cross-CPU check"
		} else {
			// Not rejected: trusted, and adopted as soon as its rate
			// is known. Pending says so.
			p.report.pending = measurePending(hw.Name)
		}
	default:
		conv, err := newConversion(hw)
		rate := rating{hz: float64(hw.Rate), origin: ev.ch.origin, errPPM: ev.ch.errPPM}
		if kc := ev.kernelConv; kc != nil && err == nil {
			conv, rate = kc.conv, rating{hz: kc.hz, origin: hwcounter.RateKernel}
		}
		if err == nil {
			err = c.switchLocked(hw, conv, rate)
		}
		if err != nil {
			p.report.rejected = format.Sprintf("%s: unusable: %v", hw.Name, err)
			return
		}
		c.st.declared = hw.Rate
		c.st.track = &tracker{ref: rawNow, src: hw, adopted: true, endsOnRegister: true, restart: true}
	}
	// The hardware counter is in use or about to be: the kernel's
	// verdict is followed for life, and the checks that need time run
	// in the background; until they pass, calibration does not adopt it
	// (but where the kernel vouches for it, a measured rate is adopted
	// at once).
	p.verdict = p.lostTrust(ev.ch.desc, hw.Name)
	p.vdsoMode = ev.ch.desc.VDSOMode
	p.report.crossCPU = "not run yet: it runs in the background"
	p.trustPending = !p.vouched
	p.checks = true
}

// Now returns the default clock's time, an Instant: nanoseconds since the
// package was initialised (Default().Now()). It never waits, never
// allocates and never returns less than a call that happened before it,
// on any goroutine. Pass a reading to Since, or subtract two with Sub, to
// measure time; a reading is not a wall-clock time (WallNow and
// Clock.WallTime are).
func Now() Instant { return defaultClock.Now() }

// Since returns the time elapsed on the default clock since start, an
// Instant that Now or Coarse returned: Default().Since(start), never
// negative, as time.Since measures from a time.Now.
func Since(start Instant) time.Duration { return defaultClock.Since(start) }

// Default returns the package's default clock, the one Now, Since,
// Coarse and WallNow read. It is shared by every package of the process:
// its Close is refused with an error; Register, Suspend and Resume
// are for the program's main package alone (see Suspend).
func Default() *Clock { return defaultClock }

// The default clock's first use. Package initialisation leaves the
// default clock on the portable source, read through first.read. A use
// (Now, Since, Coarse, WallNow, Time, Info) notes the first one, which
// costs its caller one compare-and-swap, and the first use firstUseGrace
// or more after it starts the set-up, in a goroutine of its own: it
// chooses the hardware counter (chooseHardware), puts the portable
// source's own read function back in the line, starts the counter's
// checks and runs the background loop. A writer method (Register,
// Suspend, Resume, Update) starts it at once: it may take the line
// away from first.read, and a registered counter needs its folds.
//
// Why not start it at the first use itself: in a new process the first
// goroutine a program starts (or the first timer it sets) costs tens of
// microseconds (a new stack's pages, the wake-up of an idle thread), and
// that would fall on the first log line or request; the first use only
// notes the time. A program that reads the clock once never pays for the
// set-up at all, and needs none: the portable source is exact without
// it. Until the set-up, the wall map is the first Time's provisional
// one; the start marks it stale, so that the next Time pairs afresh.
//
// The read path has no "initialised?" branch: first.read is the line's
// read function, and once the set-up has run, no bank holds it.
//
// The set-up's goroutine must belong to no testing/synctest bubble (its
// timers would run on the bubble's fake clock, and the bubble would wait
// for it for ever), and a goroutine started inside a bubble joins it.
// So a use inside a bubble neither notes nor starts anything: the clock
// runs on the portable source, which reads real time there too, until
// it is used outside one.

// firstUseGrace is how long after the first use a use starts the
// set-up: a program that reads the clock once, or only at its start,
// pays nothing for it, and a CPU of a small machine is not taken from
// the caller's first moments (the set-up's probes, the checks' pinned
// threads, calibration).
const firstUseGrace = 10 * time.Millisecond

// readDefaultFirstUse is the default clock's first.read: the portable
// source, which starts the set-up. It is a function, not a closure, so
// that initialisation allocates none.
func readDefaultFirstUse() uint64 {
	defaultPolicy.wakeFirstUse()
	return readMono()
}

// readFirstUse is first.read for the clocks of newDefaultClock.
func (p *trustPolicy) readFirstUse() uint64 {
	p.wakeFirstUse()
	return readMono()
}

// wakeFirstUse is a use of the default clock: it notes the first one
// and starts the set-up at the first use firstUseGrace or more after
// it (see above); a no-op on other clocks (p nil, or a policy that no
// first use waits for), once the set-up has started, and inside a
// testing/synctest bubble.
func (p *trustPolicy) wakeFirstUse() {
	if p == nil || !p.first.deferred || p.first.used.Load() {
		return
	}
	now := runtimeNano()
	if first := p.first.at.Load(); first != 0 {
		if now-first >= int64(firstUseGrace) {
			p.startSetUp()
		}
		return
	}
	if !inSynctestBubble() {
		p.first.at.CompareAndSwap(0, now)
	}
}

// startSetUp starts the default clock's set-up now, unless it has
// started or the caller is in a testing/synctest bubble: what a writer
// method, and a use firstUseGrace after the first, do.
func (p *trustPolicy) startSetUp() {
	if p == nil || !p.first.deferred || p.first.used.Load() || inSynctestBubble() {
		return
	}
	if p.first.used.CompareAndSwap(false, true) {
		p.first.at.CompareAndSwap(0, runtimeNano())
		// A wall map made before (provisional, from one quick pairing)
		// is refined at the background loop's first look: startMap set
		// it due.
		go p.first.clock.setUp()
	}
}

// wakeFirstUse: see trustPolicy.wakeFirstUse.
func (c *Clock) wakeFirstUse() { c.st.policy.wakeFirstUse() }

// started reports whether the set-up has started (or never waited for a
// first use): whether the clock's background goroutine runs, or will.
func (p *trustPolicy) started() bool { return p == nil || !p.first.deferred || p.first.used.Load() }

// claimUnused marks a clock closed before its first use as used, so that
// no set-up starts: it reports whether none had (and none will).
func (p *trustPolicy) claimUnused() bool {
	return p != nil && p.first.deferred && p.first.used.CompareAndSwap(false, true)
}

// inSynctestBubble reports whether the caller runs in a testing/synctest
// bubble: there, and only there, time.Now carries no monotonic reading
// (runtime.time_runtimeNow leaves it out), which Round(0) strips.
func inSynctestBubble() bool {
	now := time.Now()
	return now == now.Round(0)
}

// setUp is the default clock's goroutine, started by a use
// firstUseGrace after the first, or by a writer: it makes the hardware
// choice, starts the counter's checks and runs the background loop.
// Started outside any testing/synctest bubble, it belongs to none, nor
// does anything it starts.
func (c *Clock) setUp() {
	// The hardware choice takes milliseconds (probes, file reads), more
	// on a loaded machine; Coarse's ticker must not wait for it: a
	// Coarse that asks for the ticker meanwhile has it started at once.
	// The background loop looks at everything at its start anyway, so a
	// wake-up taken here for another reason is not lost. The kick after
	// the choice ends the helper, which takes every kick until it has
	// ended (done), the background loop none before.
	var chosen atomic.Bool
	done := make(chan struct{})
	go func(w clockRef, st *clockState) {
		defer close(done)
		for <-st.loop.wake; !chosen.Load(); <-st.loop.wake {
			startCoarse(w, st)
		}
	}(weakClock(c), c.st)
	c.chooseHardware()
	chosen.Store(true)
	c.kick()
	<-done
	c.st.mu.Lock()
	checks := c.st.policy.checks && !c.st.loop.closed
	c.dropFirstUseReadLocked() // also where the choice was made before (tests), or the clock closed
	c.unlock()
	if checks {
		go c.checkTrust()
	}
	c.background()
}

// dropFirstUseReadLocked puts the portable source's own read function
// back where first.read is: in the Source, and in the line readers use
// (the same counter, read the same way, so no freeze is needed). A
// suspended clock's line reads the stand-in; Resume publishes the
// Source's read function.
func (c *Clock) dropFirstUseReadLocked() {
	first := funcPtr(c.st.policy.first.read)
	if funcPtr(c.st.src.Read) == first {
		c.st.src.Read = readMono
	}
	if funcPtr(c.st.cur.read) == first {
		ln := c.st.cur
		ln.read = readMono
		c.publishLocked(ln)
	}
}
