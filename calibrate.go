package schedclock

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/schedclock/schedclock/internal/kernel"
	"github.com/schedclock/schedclock/internal/vdso"
)

// Calibration and the watch. A Clock with a reference (WithReference; the
// default clock's is CLOCK_MONOTONIC_RAW) trusts its counter only as far
// as the reference confirms it, for as long as it runs:
//
//   - Calibration measures the counter's rate against the reference over
//     a growing baseline (calibrationSchedule) and adopts each better
//     estimate; after the schedule it keeps measuring over a sliding
//     baseline (slideEvery, slideSpan), so slow drift (a crystal warming
//     up, ageing) is followed by rate slews. Every adoption is a switch of
//     the same counter to a new rate, anchored at the pinned counter
//     value: it never moves time.
//   - The watch compares the clock's progress with the reference's every
//     watchPeriod at first, then at periods doubling to maxWatchPeriod
//     while the counter agrees (see watchConfirm), each side read in a
//     bracket (clock, reference, clock).
//     A disagreement larger than the rate's estimated error, a drift
//     allowance (watchDriftPPM), both brackets, two ticks of the counter
//     and watchFloor can explain means the counter misbehaved: it stepped
//     back (a snapshot restore, a reset across suspend), jumped forward (a
//     live migration without TSC scaling) or changed rate (a hypervisor
//     changed the TSC frequency). The watch then measures the counter's
//     rate afresh over rateProbe, and re-anchors the clock on its
//     timeline: the value the reference says it has reached since the
//     last good comparison, at the new rate if the rate changed. The
//     re-anchoring is a switch like any other (see switch.go): it never
//     steps back, so after a jump forward the clock goes on from what
//     readers saw; Info counts it (Watch.Reanchors) and says why. But only
//     a jump that the reference's progress could explain (the counter
//     ran at most twice its pace since the last comparison, and at most
//     maxWatchPeriod ahead) is followed on: a reading beyond that is not
//     time but one the counter cannot have produced (a migrated
//     counter's 10 s jump; a paravirtual page's delta that wrapped: 279
//     years; a value that saturates the clock at math.MaxInt64), and
//     following the counter on from it would carry the clock that far
//     ahead of its reference for good. Readers that read such a value
//     before the watch saw it have read it (no layer above a Source can
//     filter its values: its Read must not produce them), and no reading
//     is ever below one already returned, whatever the watch decides: so
//     the clock stands still at V, the highest value a reader may have
//     read (the freezer's pin), its line a constant as a suspended
//     clock's, until the reference's timeline reaches V (standStill,
//     checkHoldLocked: the tracker looks when the reference should have
//     counted the lead), and goes on on that timeline at the counter's
//     rate from there. The refusal costs a stand-still as long as the
//     lead refused, at most; Info counts it (Watch.CounterFaults), says
//     what and when, and shows the stand-still (Watch.Holding,
//     StandStill). A value past math.MaxInt64 holds the clock there for
//     good.
//   - At each comparison that agrees, the watch folds the epoch forward,
//     at the counter value the comparison paired with the reference (a
//     fresh read could be a value the counter cannot have produced, and
//     readers, who clamp below the epoch, would stand there), so the
//     epoch is never more than a watch period old, and a counter that steps
//     back makes readers, who clamp at the epoch, dip by at most that
//     much before the watch puts the clock back on its timeline. A
//     counter that jumps forward is not hidden: readers cannot tell it
//     from a stopped process whose reference ran on too, and what they
//     saw stands.
//
// While the clock is suspended or stands still, both stand aside
// (Resume is the caller's word; a stand-still ends where the timeline
// says); they start afresh on Resume and after each re-anchoring.

const (
	// watchPeriod is how often the watch compares the clock with its
	// reference and folds the epoch.
	watchPeriod = 100 * time.Millisecond
	// watchDriftPPM is how far the counter's rate may have drifted from
	// the estimate (between refinements) before the watch calls it a
	// rate change rather than drift.
	watchDriftPPM = 50
	// watchFloor is the disagreement the watch always tolerates: the
	// reference's own jitter.
	watchFloor = 2 * time.Microsecond
	// watchSamples is how many (clock, reference, clock) brackets a
	// comparison takes; the narrowest wins.
	watchSamples = 8
	// rateProbe is how long the watch measures the counter's rate after a
	// disagreement, to tell a rate change from a step.
	rateProbe = 10 * time.Millisecond
	// firstMeasurement is how long the default clock measures a rate that
	// no CPU register gives before it adopts the hardware counter.
	firstMeasurement = 20 * time.Millisecond
	// slideEvery and slideSpan: after the calibration schedule, the rate
	// is measured every slideEvery over the last slideSpan.
	slideEvery = 16 * time.Second
	slideSpan  = 256 * time.Second
)

// calibrationSchedule lists when, counted from the baseline, the rate is
// measured again. The error of a measurement is the width of its two
// brackets over the baseline, so it shrinks as 1/t.
var calibrationSchedule = []time.Duration{
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	1 * time.Second, 1500 * time.Millisecond, 2 * time.Second, 4 * time.Second,
	8 * time.Second, 16 * time.Second, 32 * time.Second, 64 * time.Second,
}

// rating is a rate and what is known of it.
type rating struct {
	hz     float64
	origin rateOrigin
	errPPM float64 // the estimate's error, the conversion's rounding included
}

// tracker is a Clock's calibration and watch state (see above).
type tracker struct {
	ref func() int64
	// witness is the clock the reference is checked against (see
	// referenceOff); nil: the runtime's monotonic clock.
	witness func() int64
	src     Source // the counter refined and watched
	// adopted says the clock runs on src. The default clock tracks the
	// hardware counter before it adopts it, while on the portable source.
	adopted bool
	// endsOnRegister: a caller's Register ends the tracking (the default
	// clock: the caller has taken it over). Otherwise the tracking moves
	// to the registered source.
	endsOnRegister bool

	cal     calibration // the rate's measurement against the reference
	restart bool        // take a new baseline at the next tick
	watch   watchState  // the watch's comparisons
	// faults counts the tracking's consecutive panics; retryAt is when it
	// restarts after the last one.
	faults  int
	retryAt time.Time
	// probe is a re-anchoring under way: the rate is measured over
	// rateProbe between two ticks, so that no writer sleeps holding the
	// lock.
	probe    *reanchorProbe
	probeDue time.Time
	// holding says a stand-still is under way (hold): the clock stands
	// still at a value readers may have read, after the watch refused a
	// reading, until its reference's timeline reaches it
	// (checkHoldLocked, at watch.due).
	holding bool
	hold    standStill
	// bracket is the narrowest (clock, reference, clock) bracket seen.
	bracket int64
}

// calibration is the tracker's measurement of the rate: where it starts
// (baseline, taken at baseAt), the next calibrationSchedule entry
// (step), the sliding baselines once the schedule is done (history), and
// when the next refinement is due.
type calibration struct {
	baseline ratePoint
	baseAt   time.Time
	step     int
	history  []ratePoint
	due      time.Time
}

// watchState is the watch's: good is the last comparison it accepted
// (haveGood: there was one); last is the last one it accepted before a
// restart (haveLast: there was one), kept across it: the first
// comparison after a restart has no good one of its own, and is checked
// against last for a counter gone far ahead while the watch was away.
// every is the watch's period: watchPeriod for the first watchConfirm
// agreements (agreed counts them), then doubled at every agreement up to
// maxWatchPeriod, and back to watchPeriod at every restart and
// re-anchoring; due is when it looks next.
type watchState struct {
	good     clockSample
	haveGood bool
	last     clockSample
	haveLast bool
	due      time.Time
	every    time.Duration
	agreed   int
}

// reanchorProbe is what the watch found when it disagreed, and the first
// point of the rate measurement that follows.
type reanchorProbe struct {
	g            clockSample
	gap, elapsed int64
	p1           ratePoint
}

// clockSample pairs a clock reading with a reference reading: the clock
// value is the midpoint of two readings that bracket one reference read,
// halfWidth half their distance; mono is the runtime's monotonic clock
// just after, the witness the reference is checked against. cyc is the
// counter value of the bracket's first reading and cycMono the runtime's
// clock just after the bracket: where the watch folds the epoch when the
// sample agrees with the reference.
type clockSample struct {
	clock, ref, halfWidth, mono int64
	cyc                         uint64
	cycMono                     int64
}

// sample takes the narrowest of watchSamples (Now, reference, Now)
// brackets, witnessed. It reads the counter as readers do, through ln,
// the published line (the writer lock is held: nothing else publishes),
// so that it knows the counter value behind each reading. A bracket whose
// second reading is below its first holds a value the counter cannot
// have produced on one side (it is monotonic): it is no bracket, however
// narrow (its width is negative), and is left out.
func (tr *tracker) sample(ln line) clockSample {
	best := clockSample{halfWidth: math.MaxInt64}
	for i := 0; i < watchSamples; i++ {
		first := ln.read()
		r := tr.ref()
		second := ln.read()
		mono := tr.witnessNow() // with the bracket: a stop after it is no stop of the reference
		before, _ := ln.at(first)
		after, _ := ln.at(second)
		if after < before {
			if best.halfWidth == math.MaxInt64 && i == watchSamples-1 {
				// Every bracket went back: pair the lower reading, with
				// both inside the half-width.
				best = clockSample{clock: after + (before-after)/2, ref: r, halfWidth: (before - after) / 2, mono: mono, cyc: second, cycMono: runtimeNano()}
			}
			continue
		}
		if w := (after - before) / 2; w < best.halfWidth {
			best = clockSample{clock: before + w, ref: r, halfWidth: w, mono: mono, cyc: first, cycMono: runtimeNano()}
		}
	}
	return best
}

// point pairs the tracker's counter with its reference (samplePoint),
// witnessed. Where the clock runs on the counter, the counter value is
// its value unwrapped by cur, the line readers read (line.total): a
// narrow counter's values repeat every wrap, and a rate measured between
// two of them would read its progress modulo its width (a 16-bit counter
// at 65536 Hz measured over 1.5 s reads as 0.5 s of counts: a rate a
// third of the truth); the unwrapped value goes on through every wrap
// the folds counted. (A bracket in which the counter wrapped reads
// backwards, and samplePoint leaves it out.) The default clock measures
// its hardware counter before it runs on it: that counter (56 bits and
// more) is read as it is, and its unwrapped value starts at its value
// when the clock adopts it, so the two agree.
func (tr *tracker) point(cur *line) ratePoint {
	p := samplePoint(tr.src.Read, tr.ref, tr.witness)
	if funcPtr(cur.read) == funcPtr(tr.src.Read) {
		p.cyc = cur.total(p.cyc)
	}
	return p
}

// witnessNow reads the witness the reference is checked against: the
// runtime's monotonic clock (tests of the schedule in a testing/synctest
// bubble give the bubble's).
func (tr *tracker) witnessNow() int64 {
	if tr.witness != nil {
		return tr.witness()
	}
	return runtimeNano()
}

// Checking the reference. The runtime's monotonic clock (CLOCK_MONOTONIC,
// steered by NTP by at most 500 ppm) is the witness: a reference whose
// progress between two samples differs from the witness's by more than
// refWitnessPPM plus refWitnessFloor is misbehaving (stuck, stepped back,
// jumped, or running at another pace), and the clock does not follow it:
// no re-anchoring, no refinement over that span.
const (
	refWitnessPPM   = 1000
	refWitnessFloor = time.Millisecond
)

// referenceOff says how a reference that moved refElapsed while the
// witness moved monoElapsed misbehaved, or "" if it agrees.
func referenceOff(refElapsed, monoElapsed int64) string {
	if abs(subSat(refElapsed, monoElapsed)) <= monoElapsed/1e6*refWitnessPPM+int64(refWitnessFloor) {
		return ""
	}
	in := time.Duration(monoElapsed)
	switch {
	case refElapsed == 0:
		return fmt.Sprintf("stuck: it did not move in %v", in)
	case refElapsed < 0:
		return fmt.Sprintf("stepped back %v in %v", time.Duration(abs(refElapsed)), in)
	case refElapsed > monoElapsed:
		return fmt.Sprintf("jumped: it moved %v in %v", time.Duration(refElapsed), in)
	}
	return fmt.Sprintf("ran slow: it moved %v in %v", time.Duration(refElapsed), in)
}

// distrust decides that the reference misbehaved (why says how): the
// tracking starts afresh from the next tick, and the Clock reports it.
func (tr *tracker) distrust(why string) trackDecision {
	tr.restart = true
	return trackDecision{distrust: why}
}

// startLocked takes a new baseline, on cur, the line readers read:
// calibration starts over from now, and the watch takes its next
// comparison as its first.
func (tr *tracker) startLocked(now time.Time, cur *line) {
	tr.cal.baseline = tr.point(cur)
	tr.cal.baseAt = now
	tr.cal.step = 0
	tr.cal.history = nil
	tr.cal.due = now.Add(calibrationSchedule[0])
	if !tr.adopted && tr.src.Rate == 0 {
		tr.cal.due = now.Add(firstMeasurement)
	}
	tr.watch.haveGood = false
	tr.watch.due = now
	tr.watch.every, tr.watch.agreed = watchPeriod, 0
	tr.probe = nil
	tr.restart = false
}

// trackSafelyLocked is trackLocked with its faults kept to itself: a
// reference or a Read that panics costs the tracking a restart after a
// backoff (100 ms, doubling to maxWatchPeriod while the faults go on),
// counted in Info, and never the fold and the rest of the tick that
// follow it.
func (c *Clock) trackSafelyLocked(tr *tracker, now time.Time) {
	c.guard("background", func() {
		c.trackLocked(tr, now)
		if !tr.restart {
			tr.faults = 0 // ran through; not waiting out a backoff
		}
	}, func(r any) {
		c.recordFaultLocked("background", r)
		tr.faults++
		tr.restart = true
		tr.retryAt = now.Add(min(watchPeriod<<min(tr.faults-1, 6), maxWatchPeriod))
	})
}

// trackLocked has calibration and the watch do what they have due, and
// applies what they decide.
func (c *Clock) trackLocked(tr *tracker, now time.Time) {
	if tr.holding {
		// The clock stands still: its line reads no counter, so there is
		// nothing to compare or measure, nor to start afresh after a
		// fault (checkHoldLocked looks a watch period later at most),
		// until it goes on.
		tr.restart = false
		if !now.Before(tr.watch.due) {
			c.checkHoldLocked(tr, now)
		}
		return
	}
	v := c.viewLocked()
	if tr.restart {
		if now.Before(tr.retryAt) {
			return // backing off after a fault
		}
		tr.startLocked(now, v.cur)
	}
	if tr.probe != nil {
		if !now.Before(tr.probeDue) {
			c.applyLocked(tr, now, tr.finishReanchor(&v))
		}
		return
	}
	refineDue := !now.Before(tr.cal.due)
	if !tr.adopted {
		if refineDue {
			c.applyLocked(tr, now, tr.refine(now, &v, tr.point(v.cur)))
		}
		return
	}
	// Refinements of an adopted counter ride on the watch's ticks, and
	// count only when the watch agreed: a refinement measured over a span
	// in which the counter stepped, jumped or changed rate would adopt a
	// rate that is no rate at all. Its point is taken before the watch's
	// comparison, so that whatever the counter did up to the point, the
	// comparison, later, sees too (a point taken after it could hold a
	// jump no comparison saw). When the watch disagrees it starts a
	// re-anchoring (or distrusts the reference), and the refinement waits
	// for the baseline that follows. A fold due before the watch brings
	// the watch forward: the watch's fold is confirmed against the
	// reference, where a fold of its own would adopt whatever the counter
	// read then (a narrow counter is folded more often than the watch's
	// longest period).
	if now.Before(tr.watch.due) && now.Before(c.st.fold.due) {
		return
	}
	var p ratePoint
	if refineDue {
		p = tr.point(v.cur)
	}
	tr.watch.due = now.Add(tr.watch.every)
	c.applyLocked(tr, now, tr.compare(now, &v))
	if c.st.track != tr || tr.restart || tr.probe != nil {
		return
	}
	if refineDue {
		c.applyLocked(tr, now, tr.refine(now, &v, p))
	}
}

// nextDue is when the tracker next needs the background goroutine. Once
// the counter is adopted, refinements ride on the watch's ticks (a
// refinement a little late measures over a longer baseline, which only
// makes it better), so that an idle process wakes once per watch period,
// not once per schedule.
func (tr *tracker) nextDue() time.Time {
	if tr.restart {
		return tr.retryAt // the zero time unless backing off after a fault
	}
	if tr.probe != nil {
		return tr.probeDue
	}
	if tr.adopted {
		return tr.watch.due
	}
	return tr.cal.due
}

// refine measures the tracked counter's rate up to p (the counter paired
// with its reference, tr.point) and decides its adoption: the first time
// for a counter whose rate nothing gave (the default clock then switches
// to it), then whenever the estimate is better, and, after the schedule,
// always (following drift).
func (tr *tracker) refine(now time.Time, v *clockView, p ratePoint) trackDecision {
	base, sliding := tr.cal.baseline, tr.cal.step >= len(calibrationSchedule)
	if sliding {
		tr.cal.history = append(tr.cal.history, p)
		for len(tr.cal.history) > 2 && p.ns-tr.cal.history[1].ns >= int64(slideSpan) {
			tr.cal.history = tr.cal.history[1:]
		}
		base = tr.cal.history[0]
		tr.cal.due = now.Add(slideEvery)
	} else {
		tr.cal.due = tr.cal.baseAt.Add(calibrationSchedule[tr.cal.step])
		tr.cal.step++
		if tr.cal.step == len(calibrationSchedule) {
			tr.cal.history = []ratePoint{tr.cal.baseline}
		}
	}
	if why := referenceOff(subSat(p.ns, base.ns), p.mono-base.mono); why != "" {
		return tr.distrust(why)
	}
	hz, errPPM, err := rateBetween(base, p)
	if err != nil || hz < 1 {
		if !tr.adopted && tr.src.Rate == 0 {
			return trackDecision{reject: fmt.Sprintf("%s: measuring its rate against the reference failed: %v", tr.src.Name, err)}
		}
		return trackDecision{}
	}
	conv, err := conversionFor(tr.src.Name, hz, tr.src.Bits)
	if err != nil {
		return trackDecision{reject: err.Error()}
	}
	// The conversion's own rounding is part of the error.
	next := rating{hz: hz, origin: rateRefined, errPPM: errPPM + math.Abs(conv.errorPPM(hz))}
	src := tr.src
	src.Rate = uint64(math.Round(hz))
	if !tr.adopted {
		if v.trustPending {
			// The counter's checks have not passed yet: measure again
			// when they end (trustSettledLocked), from the same baseline,
			// rather than wake every few milliseconds for a minute and
			// a half of retries.
			tr.cal.due = now.Add(trustWait)
			tr.cal.step--
			return trackDecision{}
		}
		if tr.src.Rate == 0 {
			next.origin = rateMeasured
		}
		tr.adopted = true
		return trackDecision{rerate: &rateChange{src: src, conv: conv, rate: next, adopt: true}}
	}
	if v.rate.origin == rateNanoseconds || v.rate.origin == rateKernel {
		return trackDecision{} // exact by construction: a measurement can only add its own error (the watch still compares)
	}
	current := v.rate.errPPM
	if v.rate.origin == rateDeclared {
		current = math.Inf(1) // a caller's word, which the reference is here to check
	}
	if !sliding && next.errPPM >= current {
		return trackDecision{}
	}
	return trackDecision{rerate: &rateChange{src: src, conv: conv, rate: next}} // the same counter, read many times just now
}

// compare compares the clock's progress with the reference's since the
// last good comparison: when they agree it decides a fold of the epoch,
// when they do not it begins a re-anchoring (tr.probe).
func (tr *tracker) compare(now time.Time, v *clockView) trackDecision {
	s := tr.sample(*v.cur)
	if w := 2 * s.halfWidth; tr.bracket == 0 || w < tr.bracket {
		tr.bracket = w
	}
	if tr.watch.haveGood {
		g := tr.watch.good
		if why := referenceOff(subSat(s.ref, g.ref), s.mono-g.mono); why != "" {
			return tr.distrust(why)
		}
		elapsed := subSat(s.ref, g.ref)
		gap := subSat(s.clock-g.clock, elapsed)
		if abs(gap) > v.watchTolerance(elapsed, s, g) {
			tr.beginReanchor(now, v.cur, g, gap, elapsed)
			return trackDecision{}
		}
		if tr.watch.agreed++; tr.watch.agreed >= watchConfirm {
			tr.watch.every = min(2*tr.watch.every, maxWatchPeriod)
			tr.watch.due = now.Add(tr.watch.every)
		}
	} else if l := tr.watch.last; tr.watch.haveLast && referenceOff(subSat(s.ref, l.ref), s.mono-l.mono) == "" {
		// The first comparison after a restart: one far ahead of where
		// the last good one and the reference put the clock is a
		// counter that went far ahead meanwhile (see timelineAnchor),
		// not a timeline to follow. Anything else (a clock that stood
		// still while suspended, a switch) is taken as it is.
		elapsed := subSat(s.ref, l.ref)
		if gap := subSat(subSat(s.clock, l.clock), elapsed); gap > explicableLead(elapsed)+v.watchTolerance(elapsed, s, l) {
			tr.beginReanchor(now, v.cur, l, gap, elapsed)
			return trackDecision{}
		}
	}
	tr.watch.good, tr.watch.haveGood = s, true
	tr.watch.last, tr.watch.haveLast = s, true
	return trackDecision{fold: true, sample: s}
}

// watchTolerance is the largest disagreement over elapsed reference
// nanoseconds that the rate's estimated error, drift, the brackets and
// the counter's resolution explain.
func (v *clockView) watchTolerance(elapsed int64, a, b clockSample) int64 {
	ppm := v.rate.errPPM + watchDriftPPM
	tick := int64(v.conv.nanos(1)) + 1
	return int64(ppm*1e-6*math.Abs(float64(elapsed))) + a.halfWidth + b.halfWidth + 2*tick + int64(watchFloor)
}

// A re-anchoring puts the clock back on its timeline after the watch saw
// the counter misbehave: the last good comparison g plus what the
// reference counted since, at the counter's rate measured afresh.
//
// It takes two ticks: beginReanchor takes the rate measurement's first
// point, finishReanchor, rateProbe later, the second and the rest, so
// that the writer lock is never held through a sleep.
func (tr *tracker) beginReanchor(now time.Time, cur *line, g clockSample, gap, elapsed int64) {
	tr.probe = &reanchorProbe{g: g, gap: gap, elapsed: elapsed, p1: tr.point(cur)}
	tr.probeDue = now.Add(rateProbe)
}

// finishReanchor measures the rate over the probe and decides the
// re-anchoring: at the rate measured, if it changed beyond the errors,
// else at the clock's.
func (tr *tracker) finishReanchor(v *clockView) trackDecision {
	pr := tr.probe
	tr.probe = nil
	src, conv, rate := *v.src, *v.conv, *v.rate
	p2 := tr.point(v.cur)
	if why := referenceOff(subSat(p2.ns, pr.p1.ns), p2.mono-pr.p1.mono); why != "" {
		return tr.distrust(why)
	}
	hz, errPPM, err := rateBetween(pr.p1, p2)
	r := &reanchoring{g: pr.g, from: rate.hz, hz: hz, gap: pr.gap, elapsed: pr.elapsed}
	if err == nil && hz >= 1 && math.Abs(hz/rate.hz-1)*1e6 > errPPM+rate.errPPM+watchDriftPPM && tr.keepsRate(v.cur, p2, hz, errPPM) {
		if cv, cerr := conversionFor(src.Name, hz, src.Bits); cerr == nil {
			conv, r.rerated = cv, true
			rate = rating{hz: hz, origin: rateRefined, errPPM: errPPM + math.Abs(cv.errorPPM(hz))}
			src.Rate = uint64(math.Round(hz))
		}
	}
	r.rateChange = rateChange{src: src, conv: conv, rate: rate}
	return trackDecision{reanchor: r}
}

// adoptedAs records that the clock runs on src, the counter adopted at
// now: the watch looks at once.
func (tr *tracker) adoptedAs(now time.Time, src Source) {
	tr.src = src
	tr.watch.due = now
}

// reanchored starts the tracking afresh on src after a re-anchoring: a
// new baseline and the first comparison, both taken at once on the new
// line cur.
func (tr *tracker) reanchored(now time.Time, src Source, cur line) {
	tr.src = src
	tr.startLocked(now, &cur)
	tr.watch.good, tr.watch.haveGood = tr.sample(cur), true
	tr.watch.last, tr.watch.haveLast = tr.watch.good, true
	tr.watch.due = now.Add(watchPeriod)
}

// standStill is a clock standing still at held, the value it had
// reached when the watch refused a reading (the highest a reader may
// have read), until its reference's timeline reaches it: r.g, the last
// good comparison, plus what the reference counted since. r is the
// re-anchoring that refused the reading, which ends the stand-still.
type standStill struct {
	r    reanchoring
	held int64
}

// checkHoldLocked ends a stand-still once the reference's timeline has
// reached the value held: a re-anchoring on it, at the counter's rate,
// from the value held or more. Before, it looks again when the reference
// should have counted what is left, and a re-anchoring that fails (its
// Read panicked) is tried again a watch period later. A reference that
// misbehaves meanwhile (against the witness, as referenceOff says) is
// not followed across what it did: the timeline goes on by the
// witness's progress since the reference last agreed with it, and by
// the reference's from here (one that goes on misbehaving is named in
// Info once the watch compares again).
func (c *Clock) checkHoldLocked(tr *tracker, now time.Time) {
	g := &tr.hold.r.g
	tr.watch.due = now.Add(watchPeriod)
	ref := tr.ref()
	mono := tr.witnessNow()
	elapsed := subSat(ref, g.ref)
	if referenceOff(elapsed, mono-g.mono) != "" {
		*g = clockSample{clock: addSat(g.clock, mono-g.mono), ref: ref, mono: mono}
		return
	}
	// Neither difference overflows: held and g.clock are clock values,
	// never negative, and elapsed agrees with the witness's progress.
	if left := tr.hold.held - g.clock - elapsed; left > 0 {
		tr.watch.due = now.Add(time.Duration(left))
		return
	}
	c.reanchorLocked(tr, now, &tr.hold.r)
}

// clockView is what a tracker is given of its Clock at a tick, to read
// and never to write: the line readers read (the watch reads the counter
// through it, as they do), the source, conversion and rate the clock
// runs on, and whether the default clock's checks of its counter are
// still running. Its pointers are to the Clock's own state, so that
// they stay true across what the Clock applies during the tick.
type clockView struct {
	cur          *line
	src          *Source
	conv         *conversion
	rate         *rating
	trustPending bool
}

func (c *Clock) viewLocked() clockView {
	return clockView{cur: &c.st.cur, src: &c.st.src, conv: &c.st.conv, rate: &c.st.rate,
		trustPending: c.st.policy != nil && c.st.policy.trustPending}
}

// trackDecision is what a tracker decided at a tick, for its Clock to
// apply (applyLocked): at most one thing; the zero value decides nothing.
type trackDecision struct {
	distrust string       // the reference misbehaved (how): it is not followed
	fold     bool         // the watch agreed: fold the epoch at sample
	sample   clockSample  // the comparison that agreed
	reject   string       // the tracked counter cannot be used (why): the tracking ends
	rerate   *rateChange  // a new rate for the counter, or its adoption
	reanchor *reanchoring // the clock back on its reference's timeline
}

// rateChange is a switch to src at conv and rate (switchLocked): a new
// rate of the clock's counter anchors at the pinned counter value, the
// adoption of another counter is related to the old line; time never
// steps back.
type rateChange struct {
	src   Source
	conv  conversion
	rate  rating
	adopt bool // the counter's first adoption: the default clock switches to it
}

// reanchoring is a switch to the clock's counter (at a new rate if
// rerated from from to hz), anchored on the timeline of the last good
// comparison g (timelineAnchor), after the watch found the clock gap ns
// off its reference over elapsed ns.
type reanchoring struct {
	rateChange
	g            clockSample
	rejoin       bool // the end of a stand-still (see tracker.hold)
	rerated      bool
	from, hz     float64
	gap, elapsed int64
}

// applyLocked applies what tr decided at now: the Clock's side of
// calibration and the watch, through the switch and the fold.
func (c *Clock) applyLocked(tr *tracker, now time.Time, d trackDecision) {
	switch {
	case d.distrust != "":
		c.st.watch.reference = fmt.Sprintf("reference %s (against the runtime's monotonic clock, at %s); not followed", d.distrust, time.Now().UTC().Format(time.RFC3339Nano))
	case d.fold:
		// The fold takes the counter value the sample paired with the
		// reference, not a fresh read: a value the counter cannot have
		// produced (one far ahead) read now would become the epoch, and
		// readers, who clamp below it, would stand there.
		c.foldLocked(d.sample.cyc, d.sample.cycMono)
		// The watch's fold restarts the refresh period: a clock with a
		// reference is folded by its watch alone, with no wake-ups of its own.
		c.st.fold.due = now.Add(c.st.conv.refreshPeriod())
	case d.reject != "":
		c.st.policy.rejectLocked(d.reject)
		c.st.track = nil
	case d.rerate != nil:
		r := d.rerate
		switch {
		case r.adopt:
			if err := c.switchLocked(r.src, r.conv, r.rate); err != nil {
				c.st.policy.rejectLocked(err.Error())
				c.st.track = nil
				return
			}
			c.st.policy.adoptedLocked(tr.src.Name)
			tr.adoptedAs(now, r.src)
		case r.conv == c.st.conv:
			c.st.rate, c.st.src.Rate = r.rate, r.src.Rate
		default:
			_ = c.switchLocked(r.src, r.conv, r.rate)
		}
	case d.reanchor != nil:
		c.reanchorLocked(tr, now, d.reanchor)
	}
}

// reanchorLocked switches as r says and reports it in Info.Watch.
func (c *Clock) reanchorLocked(tr *tracker, now time.Time, r *reanchoring) {
	src := r.src
	var refused farReading
	if c.switchAnchoredLocked(src, r.conv, r.rate, timelineAnchor(src.Read, tr.ref, r.g, &refused)) != nil {
		return // the counter's Read panicked: the clock is as it was
	}
	c.st.watch.reanchors++
	switch {
	case refused.ahead > 0:
		c.st.watch.counterFaults++
		past, end := "", ""
		if refused.saturated {
			past, end = "past math.MaxInt64 (", ")"
		}
		c.st.watch.lastCounterFault = fmt.Sprintf("%s: read %s%v ahead of the reference%s, which counted %v since the last comparison: a reading it cannot have produced, not followed; the clock stands still at %v, the most a reader may have read, until the reference's timeline reaches it (at %s)",
			src.Name, past, time.Duration(refused.ahead), end, time.Duration(refused.elapsed), time.Duration(refused.held), time.Now().UTC().Format(time.RFC3339Nano))
		c.st.watch.lastReanchor = "a reading ahead of the reference's timeline not followed: the clock stands still (see LastCounterFault)"
		// The tracking waits for the timeline (checkHoldLocked), from
		// when the reference should have counted the lead.
		tr.holding = true
		tr.hold = standStill{r: *r, held: refused.held} // r may be tr.hold.r: read before written
		tr.hold.r.rejoin = true
		tr.watch.due = now.Add(time.Duration(refused.ahead))
		c.st.watch.standStill = time.Duration(refused.ahead)
		return
	case r.rejoin:
		c.st.watch.lastReanchor = "the clock stood still until the reference's timeline reached what readers may have read (see StandStill)"
	case r.rerated:
		c.st.watch.lastReanchor = fmt.Sprintf("%s: rate changed from %.0f Hz to %.0f Hz (%+.4f%%)", src.Name, r.from, r.hz, (r.hz/r.from-1)*100)
	case r.gap < 0:
		c.st.watch.lastReanchor = fmt.Sprintf("%s: fell %v behind the reference in %v (stepped back or stalled)", src.Name, time.Duration(-r.gap), time.Duration(r.elapsed))
	default:
		c.st.watch.lastReanchor = fmt.Sprintf("%s: ran %v ahead of the reference in %v (jumped forward)", src.Name, time.Duration(r.gap), time.Duration(r.elapsed))
	}
	tr.reanchored(now, src, c.st.cur)
}

const (
	// watchConfirm is how many agreements in a row at watchPeriod
	// confirm a counter; each agreement after them doubles the watch's
	// period, up to maxWatchPeriod: 100 ms for the first half second
	// after a start, a Resume or a re-anchoring, then 200, 400, 800 ms,
	// 1.6 s and 2 s from 3.5 s on. The watch's period bounds how long a
	// counter that stepped back goes unnoticed (readers clamp at the
	// epoch the watch folded, at most one period old), and every watch
	// is a wake-up of an otherwise idle process.
	watchConfirm   = 5
	maxWatchPeriod = 2 * time.Second
	// trustWait is how long a measured counter whose trust checks are
	// still running waits before it is measured again, unless the checks
	// end first (trustSettledLocked): longer than all their retries.
	trustWait = 2 * time.Minute
)

// trustSettledLocked records that the default clock's checks of its
// hardware counter have ended, and has a counter waiting for them
// measured at once.
func (c *Clock) trustSettledLocked(now time.Time) {
	c.st.policy.trustPending = false
	if tr := c.st.track; tr != nil && !tr.adopted {
		tr.cal.due = now
	}
	c.kick()
}

// keepsRate says whether the counter, measured at hz (within errPPM) up
// to p, still runs at that rate from p on: a second measurement, from p
// to a point taken now, that disagrees beyond both errors and the drift
// allowance means the probe spanned a step of the counter (it jumped
// between the probe's two points), not a new rate. Where the second
// measurement cannot be made (neither the counter nor the reference
// moved since p), the probe is taken as it is.
func (tr *tracker) keepsRate(cur *line, p ratePoint, hz, errPPM float64) bool {
	again, againPPM, err := rateBetween(p, tr.point(cur))
	return err != nil || math.Abs(again/hz-1)*1e6 <= errPPM+againPPM+watchDriftPPM
}

// timelineAnchor anchors the clock on its timeline: at a counter value
// paired with a reference reading after the pin, the last good
// comparison g plus the reference's progress since, t, or V if that is
// more (time never steps back), unless V is more than t plus what the
// reference counted since g (the counter ran at more than twice its
// reference's pace) or plus maxWatchPeriod: such a V is no time but a
// reading the counter cannot have produced (a jump of a migrated
// counter, a paravirtual page's delta that wrapped, a garbage value
// that saturated the clock), and following the counter on from it would
// carry the clock that far ahead of its reference for good. Readers may
// have read V, so the clock stands still there (hold) until t reaches it
// (see tracker.hold), and refused says by how much V was ahead, over
// what elapsed time.
func timelineAnchor(read func() uint64, ref func() int64, g clockSample, refused *farReading) anchorFunc {
	guarded := func() int64 { return blamed(true, ref) }
	return func(_ uint64, ns int64, frac uint64) (uint64, int64, uint64, bool) {
		p := samplePoint(read, guarded, nil)
		if p.halfWidth == ^uint64(0) {
			// The counter went backwards within every bracket: pair one
			// read with the reference that follows it.
			p = ratePoint{cyc: read(), ns: guarded()}
		}
		elapsed := subSat(p.ns, g.ref)
		t := addSat(g.clock, elapsed)
		if t > ns {
			return p.cyc, t, 0, false
		}
		if ahead := subSat(ns, t); ahead > explicableLead(elapsed) {
			*refused = farReading{ahead: ahead, elapsed: elapsed, held: ns, saturated: ns == math.MaxInt64}
			return p.cyc, ns, frac, true
		}
		return p.cyc, ns, frac, false
	}
}

// explicableLead is how far ahead of its reference's timeline a counter
// may have carried the clock over elapsed reference nanoseconds and still
// be believed: as far as the reference counted (the counter ran at most
// twice its pace), and never more than maxWatchPeriod, the watch's
// longest period.
func explicableLead(elapsed int64) int64 {
	return min(max(elapsed, 0), int64(maxWatchPeriod))
}

// farReading is a reading a re-anchoring refused: how far ahead of the
// reference's timeline it was, how much the reference had counted since
// the last good comparison, the clock's value there (held: where it
// stands still), and whether it saturated the clock.
type farReading struct {
	ahead, elapsed, held int64
	saturated            bool
}

// abs is |v|, saturated: abs(math.MinInt64) is math.MaxInt64.
func abs(v int64) int64 {
	switch {
	case v == math.MinInt64:
		return math.MaxInt64
	case v < 0:
		return -v
	}
	return v
}

// ratePoint pairs a counter value with a reference clock: the counter
// value is the midpoint of two counter reads that bracket one reference
// read, and halfWidth is half their distance, the uncertainty of the
// pairing in counter cycles (all ones: no pairing was found).
type ratePoint struct {
	cyc       uint64
	ns        int64
	halfWidth uint64
	mono      int64 // the runtime's monotonic clock just after (the witness)
}

// bracketSamples is how many bracketed reads samplePoint takes; the
// narrowest bracket wins, which filters out preemptions and slow syscalls.
const bracketSamples = 32

// samplePoint takes the fastest of bracketSamples (counter, reference,
// counter) reads, witnessed right after the bracket it keeps (witness;
// nil: the runtime's monotonic clock), so that a stop after that bracket,
// which no bracket width shows, is not taken for the reference's. A bracket cannot be trusted below the counter's own
// step: a counter that moves in coarse steps (jiffies, an emulated
// counter) reads the same value on both sides of most brackets, though
// its true value lies anywhere within the step. So the half-width is at
// least one count, and at least the step the counter takes when read
// until it moves.
func samplePoint(read func() uint64, ref, witness func() int64) ratePoint {
	if witness == nil {
		witness = runtimeNano
	}
	best := ratePoint{halfWidth: ^uint64(0)}
	for i := 0; i < bracketSamples; i++ {
		before := read()
		ns := ref()
		after := read()
		mono := witness() // with the bracket: a stop after it is no stop of the reference
		if after < before {
			continue
		}
		width := after - before
		if width/2 < best.halfWidth {
			best = ratePoint{cyc: before + width/2, ns: ns, halfWidth: width / 2, mono: mono}
		}
	}
	if best.halfWidth == ^uint64(0) {
		best.mono = witness()
		return best
	}
	best.halfWidth = max(best.halfWidth, 1, counterStep(read))
	return best
}

// counterStep reads the counter until it moves (at most stepReads
// times) and returns by how much: its resolution, as far as a reader can
// see it (0 if it never moved). The smallest of three tries, so that a
// reader preempted while it waits does not count the preemption.
func counterStep(read func() uint64) uint64 {
	step := ^uint64(0)
	for try := 0; try < 3; try++ {
		first := read()
		for i := 0; i < stepReads; i++ {
			if v := read(); v != first {
				step = min(step, v-first)
				break
			}
		}
	}
	if step == ^uint64(0) {
		return 0
	}
	return step
}

// stepReads bounds counterStep: about 100 µs of reads of a fast counter.
const stepReads = 4096

// rateBetween returns the counter rate in Hz between two points and its
// worst-case error in ppm: both brackets' half-widths plus one nanosecond
// of reference resolution at each end.
func rateBetween(a, b ratePoint) (hz float64, errPPM float64, err error) {
	if a.halfWidth == ^uint64(0) || b.halfWidth == ^uint64(0) {
		return 0, 0, errors.New("counter never read forwards")
	}
	if b.cyc <= a.cyc || b.ns <= a.ns {
		return 0, 0, errors.New("counter or reference did not advance")
	}
	cycles := float64(b.cyc - a.cyc)
	nanos := float64(b.ns - a.ns)
	hz = cycles / nanos * 1e9
	errPPM = (float64(a.halfWidth+b.halfWidth)/cycles + 2/nanos) * 1e6
	return hz, errPPM, nil
}

// measureRate measures read's rate against the raw clock over about d (it
// sleeps for d) and returns it with its worst-case error in ppm.
func measureRate(read func() uint64, d time.Duration) (hz float64, errPPM float64, err error) {
	start := samplePoint(read, rawNow, nil)
	time.Sleep(d)
	return rateBetween(start, samplePoint(read, rawNow, nil))
}

// rawClockName names the reference clock that rates are measured against.
// Where there is no CLOCK_MONOTONIC_RAW, Go's monotonic clock stands in.
var rawClockName = func() string {
	if kernel.HasMonotonicRaw {
		return "CLOCK_MONOTONIC_RAW"
	}
	return "Go monotonic clock"
}()

// rawNow reads CLOCK_MONOTONIC_RAW: the kernel's unsteered clock, the
// reference for every rate this package measures (Go's monotonic clock
// where there is none).
//
// It reads through the vDSO where internal/vdso can call it (a call
// rather than a system call), looked up at first use.
func rawNow() int64 {
	if rc := rawClock(); rc != nil {
		return rc.Now()
	}
	if ns, err := kernel.MonotonicRaw(); err == nil {
		return ns
	}
	return int64(readMono())
}

// rawClock is CLOCK_MONOTONIC_RAW through internal/vdso (its vDSO path or
// its system call), nil where there is none.
func rawClock() *vdso.Clock { return rawReader.open() }

var rawReader = vdsoReader{id: vdso.MonotonicRaw}
