package schedclock

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/schedclock/schedclock/internal/format"
	"github.com/schedclock/schedclock/internal/hwcounter"
	"github.com/schedclock/schedclock/internal/warp"
)

// trustPolicy is the default clock's trust in its hardware counter: the
// evidence it rests on, the checks still to run, and the fall-back to the
// portable source when the evidence goes. Only the default clock has one
// (clockState.policy is nil for clocks made by New), as the kernel keeps
// its clocksource watchdog apart from sched_clock's read data. Its fields
// are guarded by the Clock's writer lock, but for those the first use
// reads: table and first (deferred, clock, read: set at construction;
// used and at, atomics).
type trustPolicy struct {
	// hw is the hardware counter the policy is about, as probed and
	// prepared (its rate 0 while it must be measured).
	hw Source
	// verdict says why hw can no longer be trusted ("" while it can): the
	// kernel's verdict and the counter's own evidence, asked every
	// verdictPeriod (verdictDue) while the clock follows them; nil once it
	// does not (a fall-back, a caller's Register, Close).
	verdict    func() string
	verdictDue time.Time
	// back is the same check while the clock is on the portable source
	// because the check failed: the clock goes back to hw once it holds
	// again ("" from it), asked every verdictReturnPeriod (verdictDue);
	// nil while the clock runs on hw, or has left it for good (a warp, a
	// failed check of the counter's own, a caller's Register, Close).
	back func() string
	// left is how the clock converted hw when it fell back (nil if it
	// never ran on it): a return takes it up again.
	left *leftLine
	// vdsoMode is hw's descriptor's VDSOMode: a return reads the kernel's
	// conversion afresh where the kernel converts hw.
	vdsoMode int32
	// describe says what the counter's own evidence shows, for
	// CounterCheck (its descriptor's Describe), nil if nothing.
	describe func() string
	// status is its descriptor's Status, nil if none.
	status func() (reading, history string)
	// ownCheck is the counter's own background check (its descriptor's
	// Prepare, given the clock's measures), nil if none.
	ownCheck func() (found string, err error)
	// vouched: the kernel runs on hw, so the clock runs on it at once and
	// the cross-CPU check is a second opinion. needsEvidence: the kernel
	// keeps a verdict on hw but it could not be read, so hw is adopted
	// only after a cross-CPU check that ran and found no warp.
	vouched, needsEvidence bool
	// trustPending holds back the adoption of hw's measured rate until
	// the background checks end (see checkTrust).
	trustPending bool
	// report is what Info says of the policy.
	report trustReport
	// The hardware choice: table is the counters chosen among (chosen,
	// once the choice is made); checks says the choice wants the
	// counter's background checks run; takenOver names the Source of a
	// caller's Register that came before the choice.
	table     []*hwcounter.Counter
	chosen    bool
	checks    bool
	takenOver string
	// first is the first use the choice waits for (default.go).
	first firstUse
	// readKernelConv reads the kernel's conversion of a counter
	// (readKernelConversion where nil; tests give their own).
	readKernelConv func(mode int32, read func() uint64) (kernelConv, error)
}

// kernelConversion is the kernel's conversion of the counter read
// reads, in vDSO clock mode mode (see readKernelConversion).
func (p *trustPolicy) kernelConversion(mode int32, read func() uint64) (kernelConv, error) {
	if p.readKernelConv != nil {
		return p.readKernelConv(mode, read)
	}
	return readKernelConversion(mode, read)
}

// leftLine is the source, conversion and rate the default clock ran on
// when it left its hardware counter.
type leftLine struct {
	src  Source
	conv conversion
	rate rating
}

// trustReport is what Info reports of the trust policy: why the clock is
// not on hw (Rejected), the kernel's word as read (Kernel), what trust
// still waits for (Pending), what the cross-CPU check and the counter's
// own check found (CrossCPU, CounterCheck).
type trustReport struct {
	rejected, kernel, pending, crossCPU, counterCheck string
}

// firstUse is the default clock's first use (default.go): deferred says
// the clock waits for it to make its hardware choice; clock is the
// clock, read the read function that notes its uses; at is when the
// first use came (the runtime's clock), used says the set-up has
// started.
type firstUse struct {
	deferred bool
	clock    *Clock
	read     func() uint64
	used     atomic.Bool
	at       atomic.Int64
}

// tickLocked asks the verdict when it is due and returns why the clock
// must fall back where it has gone, or, on its fall back, whether it
// can go back (back: the check holds again), and when the background
// goroutine must wake for the next one (zero: no need). The verdict
// rides on the watch's ticks when there are any (watching: at most
// maxWatchPeriod late on a 5 s poll), so that an idle process wakes
// once per watch period; on the fall back there is no watch, and the
// poll for a return wakes the goroutine every verdictReturnPeriod. A
// suspended clock does not poll (nor watch): its due time may have
// passed, and must not wake the goroutine.
func (p *trustPolicy) tickLocked(now time.Time, suspended, watching bool) (due time.Time, fallBack string, back bool) {
	if p == nil || p.verdict == nil && p.back == nil {
		return time.Time{}, "", false
	}
	if suspended {
		return time.Time{}, "", false // neither polled nor scheduled
	}
	if p.back != nil {
		if !now.Before(p.verdictDue) {
			p.verdictDue = now.Add(verdictReturnPeriod)
			if p.describe != nil {
				p.report.counterCheck = p.describe()
			}
			if p.back() == "" {
				return time.Time{}, "", true
			}
		}
		return p.verdictDue, "", false
	}
	if !now.Before(p.verdictDue) {
		p.verdictDue = now.Add(verdictPeriod)
		if p.describe != nil {
			p.report.counterCheck = p.describe()
		}
		if why := p.verdict(); why != "" {
			return time.Time{}, why, false
		}
	}
	if watching {
		return time.Time{}, "", false
	}
	return p.verdictDue, "", false
}

// verdictReturnPeriod is how often the default clock, on the portable
// source because the kernel left its counter (or the counter's own
// evidence went), reads the kernel's word again to go back to the
// counter: one small sysfs read (and the counter's evidence) per
// wake-up, only while it waits for that; the kernel's return shows
// within as long.
const verdictReturnPeriod = 2 * time.Second

// followKernelLocked is the background goroutine's work on the trust
// policy at now (see tickLocked): it falls back, or goes back, as the
// kernel's word says, and returns when it is next due.
func (c *Clock) followKernelLocked(now time.Time) time.Time {
	p := c.st.policy
	due, fallBack, back := p.tickLocked(now, c.st.suspended, c.st.track != nil && c.st.track.adopted)
	switch {
	case fallBack != "":
		check := p.verdict
		c.fallBackLocked(fallBack)
		// It follows the kernel back: the same check, every
		// verdictReturnPeriod.
		p.back, p.verdictDue = check, now.Add(verdictReturnPeriod)
		p.report.pending = format.Sprintf("%s: back on it once %s again (read every %v)", p.hw.Name, p.awaited(), verdictReturnPeriod)
		return p.verdictDue
	case back:
		c.goBackLocked(now)
	}
	return due
}

// awaited says what the clock's return to its counter waits for.
func (p *trustPolicy) awaited() string {
	if p.vouched {
		return "the kernel runs on it"
	}
	return "its evidence holds"
}

// goBackLocked takes the hardware counter up again after a fall back
// whose cause is gone: at the conversion and rate it had when it left
// (the kernel's conversion read afresh, where the kernel converts it),
// watched and followed again; a counter it never ran on (its rate was
// still to be measured) is measured again first, as at the start.
func (c *Clock) goBackLocked(now time.Time) {
	p := c.st.policy
	check := p.back
	p.back = nil
	retry := func(why string) {
		p.back, p.verdictDue = check, now.Add(verdictReturnPeriod)
		p.report.pending = format.Sprintf("%s: going back to it failed (%s); tried again in %v", p.hw.Name, why, verdictReturnPeriod)
	}
	tr := &tracker{ref: rawNow, src: p.hw, endsOnRegister: true, restart: true}
	if l := p.left; l != nil {
		hw, conv, rate := l.src, l.conv, l.rate
		if rate.origin == hwcounter.RateKernel {
			kc, err := p.kernelConversion(p.vdsoMode, hw.Read)
			if err != nil {
				retry("the kernel's conversion: " + err.Error())
				return
			}
			hw.Rate, conv, rate = uint64(math.Round(kc.hz)), kc.conv, rating{hz: kc.hz, origin: hwcounter.RateKernel}
		}
		if err := c.switchLocked(hw, conv, rate); err != nil {
			retry(err.Error())
			return
		}
		tr.src, tr.adopted = hw, true
		p.report.pending = ""
	} else {
		p.report.pending = measurePending(p.hw.Name)
	}
	c.st.track = tr
	p.report.rejected = ""
	p.verdict, p.verdictDue = check, now.Add(verdictPeriod)
	c.kick()
}

// rejectLocked records why the default clock does not run on its
// hardware counter; clocks made by New have nothing to record.
func (p *trustPolicy) rejectLocked(why string) {
	if p != nil {
		p.report.rejected = why
	}
}

// adoptedLocked records that the clock now runs on its hardware counter
// name, its rate measured.
func (p *trustPolicy) adoptedLocked(name string) {
	if p == nil {
		return
	}
	p.report.rejected = ""
	if p.report.pending == measurePending(name) {
		p.report.pending = ""
	}
}

// registerLocked is a caller's Register(src) taking the default clock
// over, tr being the clock's calibration and watch: endTrack says they
// end (those of the hardware counter), and with them the following of
// the kernel's verdict. undo puts the policy back, for a Register that
// fails.
func (p *trustPolicy) registerLocked(src Source, tr *tracker) (endTrack bool, undo func()) {
	if p != nil && p.first.deferred && !p.chosen {
		// Before the hardware choice: it will find the clock taken over.
		prev := p.takenOver
		p.takenOver = src.Name
		return false, func() { p.takenOver = prev }
	}
	if tr == nil || !tr.endsOnRegister {
		return false, func() {}
	}
	if p == nil {
		return true, func() {}
	}
	verdict, back, rejected, pending := p.verdict, p.back, p.report.rejected, p.report.pending
	p.verdict, p.back = nil, nil
	if !tr.adopted {
		// The default clock was about to adopt the hardware counter.
		p.report.rejected = format.Sprintf("%s: not adopted: Register(%q) took the clock over first", tr.src.Name, src.Name)
		p.report.pending = ""
	}
	return true, func() { p.verdict, p.back, p.report.rejected, p.report.pending = verdict, back, rejected, pending }
}

// closeLocked stops following the kernel's verdict, and waiting for it
// to allow a return.
func (p *trustPolicy) closeLocked() {
	if p != nil {
		p.verdict, p.back = nil, nil
	}
}

// fillInfo adds the policy's evidence to in.
func (p *trustPolicy) fillInfo(in *Info) {
	if p == nil {
		return
	}
	in.Evidence.Rejected, in.Evidence.Kernel, in.Evidence.Pending = p.report.rejected, p.report.kernel, p.report.pending
	in.Evidence.CrossCPU, in.Evidence.CounterCheck = p.report.crossCPU, p.report.counterCheck
	if p.status != nil && in.Source == p.hw.Name {
		reading, history := p.status()
		if reading != "" {
			in.Source += " (" + reading + ")"
		}
		if history != "" {
			in.Evidence.CounterCheck += "; " + history
		}
	}
}

// checkTrust runs the checks a hardware counter must pass before the
// default clock trusts it, in the background: the counter's own check
// (for CNTVCT, the read cost against the portable source: a counter the
// kernel traps) and the cross-CPU warp check (the kernel's
// check_tsc_warp), retried after warpRetryAfter, doubling, warpRetries
// times while it cannot run (one CPU allowed, GOMAXPROCS=1, a machine
// too busy). A counter that fails leaves the default clock on, or sends
// it back to, the portable source, and Info says why; a counter whose
// kernel verdict could not be read is adopted only after a check that
// ran and found no warp.
func (c *Clock) checkTrust() {
	p := c.st.policy
	hw := p.hw
	var found string
	var ownErr error
	if p.ownCheck != nil {
		found, ownErr = p.ownCheck()
	}
	c.st.mu.Lock()
	if c.st.loop.closed {
		c.unlock()
		return // closed before its first use ended: nothing to check for
	}
	p.report.crossCPU = "running"
	c.unlock()
	rep := warp.Check(hw.Read, hw.Rate, warp.DefaultBudget)
	first := warpRetryAfter
	if p.vouched {
		first = vouchedRetryAfter
	}
	for i, wait := 0, first; rep.Verdict == warp.Unchecked && !rep.Never && i < warpRetries; i, wait = i+1, 2*wait {
		c.st.mu.Lock()
		p.report.crossCPU = format.Sprintf("%s; again in %v (try %d of %d)", rep, wait, i+2, warpRetries+1)
		if !p.vouched {
			p.report.pending = format.Sprintf("the cross-CPU check, again in %v (try %d of %d)", wait, i+2, warpRetries+1)
		}
		c.unlock()
		if !c.sleepUnlessClosed(wait) {
			return
		}
		rep = warp.Check(hw.Read, hw.Rate, warp.DefaultBudget)
	}
	c.st.mu.Lock()
	defer c.unlock()
	c.checkedLocked(rep, found, ownErr)
}

// checkedLocked takes what the counter's checks found: the cross-CPU
// check's report rep, and the counter's own check's finding and error.
// A counter that failed them is left, or not gone back to, for good.
func (c *Clock) checkedLocked(rep warp.Report, found string, ownErr error) {
	p := c.st.policy
	hw := p.hw
	c.trustSettledLocked(time.Now())
	if p.back == nil {
		p.report.pending = "" // not a return the kernel's word still has to allow
	}
	p.report.crossCPU = rep.String()
	if p.ownCheck != nil {
		p.report.counterCheck = found
	}
	// On the portable source for the kernel's word, the clock still
	// takes the checks' verdict: a counter that failed them is not gone
	// back to.
	if c.st.loop.closed || p.back == nil && (c.st.track == nil || c.st.track.src.Name != hw.Name) {
		return // closed, or a caller took the clock over
	}
	err := warpUntrusted(rep, hw.Name)
	if err == nil {
		err = ownErr
	}
	if err == nil && p.needsEvidence && rep.Verdict != warp.None {
		err = format.Errorf("%w %q: no evidence: %s, and %s", errUntrusted, hw.Name, p.report.kernel, rep)
	}
	if err != nil {
		c.fallBackLocked(err.Error())
	}
	c.kick()
}

// warpRetryAfter is how long the default clock waits before it runs the
// cross-CPU check again when it could not run, on a counter whose
// adoption waits for it; the wait doubles at each of warpRetries tries
// (3, 6, 12, 24, 48 s). Where the kernel vouches for the counter (its
// clocksource is the counter: it checked the CPUs' counters against each
// other as each came up, and its watchdog watches it), the clock runs on
// it already and the check is a second opinion: it is retried after
// vouchedRetryAfter instead (1, 2, 4, 8, 16 min), since each try keeps
// two threads spinning on every pair of CPUs for its budget (20 ms of
// CPU on two CPUs), which an idle process should not pay every few
// seconds.
const (
	warpRetryAfter    = 3 * time.Second
	vouchedRetryAfter = time.Minute
	warpRetries       = 5
)

// sleepUnlessClosed sleeps for d or until the clock is closed, and
// reports whether it is still open.
func (c *Clock) sleepUnlessClosed(d time.Duration) bool {
	nap := newWakeTimer(d)
	defer nap.Stop()
	c.st.mu.Lock()
	open := !c.st.loop.closed
	if open {
		c.st.loop.naps = append(c.st.loop.naps, nap) // Close fires it
	}
	c.st.mu.Unlock()
	if open {
		<-nap.C
	}
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	for i, n := range c.st.loop.naps {
		if n == nap {
			c.st.loop.naps = append(c.st.loop.naps[:i], c.st.loop.naps[i+1:]...)
			break
		}
	}
	return !c.st.loop.closed
}

// fallBackLocked leaves the hardware counter for the portable source, for
// the reason why, and stops calibrating, watching and following it.
func (c *Clock) fallBackLocked(why string) {
	c.st.track = nil
	c.st.policy.closeLocked()
	c.st.policy.rejectLocked(why)
	if funcPtr(c.st.src.Read) == portableReadPtr {
		return
	}
	if p := c.st.policy; p != nil && funcPtr(c.st.src.Read) == funcPtr(p.hw.Read) {
		p.left = &leftLine{src: c.st.src, conv: c.st.conv, rate: c.st.rate}
	}
	src := Portable()
	conv, err := newConversion(src)
	if err == nil {
		err = c.switchLocked(src, conv, rating{hz: 1e9, origin: hwcounter.RateDeclared})
	}
	if err != nil {
		c.st.policy.rejectLocked(format.Sprintf("%s; switching to the portable source failed: %v", why, err))
	}
}

// measurePending is what Info.Evidence.Pending says while the default clock
// measures the rate of the trusted counter name before adopting it.
func measurePending(name string) string {
	return format.Sprintf("%s: adopted once its rate is measured against %s (%v)", name, rawClockName, firstMeasurement)
}

// lostTrust returns the default clock's check that the kernel still runs
// on the counter d describes, and that the counter's own evidence still
// holds: "" while both do, else why not; each check records the
// kernel's word in the report (Info.Evidence.Kernel), so that it says
// what the check last read. nil where there is nothing to follow (the
// kernel keeps no verdict on the counter, and it has no evidence of its
// own). Where the kernel's word cannot be read (not Linux, no sysfs),
// the kernel has nothing to say (kernel.Verdict.Keep).
func (p *trustPolicy) lostTrust(d *hwcounter.Counter, name string) func() string {
	if d.Verdict == nil && d.Evidence == nil {
		return nil
	}
	return func() string {
		if d.Verdict != nil {
			v := d.Verdict()
			p.report.kernel = v.String()
			if !v.Keep() {
				return format.Sprintf("%s: %s", name, v)
			}
		}
		if d.Evidence != nil {
			if why := d.Evidence(); why != "" {
				return format.Sprintf("%s: %s", name, why)
			}
		}
		return ""
	}
}

// warpUntrusted returns nil unless the cross-CPU check found a warp, and
// then an error wrapping errUntrusted that names the counter, the CPUs
// and the warp.
func warpUntrusted(r warp.Report, name string) error {
	if r.Verdict != warp.Found {
		return nil
	}
	return format.Errorf("%w %q: %s", errUntrusted, name, r)
}
