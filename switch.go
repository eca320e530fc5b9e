package schedclock

import (
	"sync/atomic"
	"time"

	"github.com/schedclock/schedclock/internal/format"
	"github.com/schedclock/schedclock/internal/hwcounter"
)

// The switch protocol: how Register, rate refinement and Suspend move
// readers from one line to another without time ever going backwards for
// any reader, wherever the writer is stopped.
//
// The hazard: between the writer's counter read and
// the publication of a new line, readers keep extrapolating the old one.
// If the new line is slower, or the old counter coarser, a reader just
// before the publication can return more than a reader just after, and
// in Go the writer can be stopped right there for milliseconds.
//
// The cure is to let the publication itself fix the switch point:
//
//  1. Publish the old line unchanged but read through a freezer, a
//     stand-in read function. The first call to it after the
//     publication, by a reader or by the writer, pins the old counter,
//     and every call returns that same value: the freezer bank reads a
//     constant V.
//  2. The writer pins the freezer itself if no reader has, and evaluates
//     V exactly, remainder included.
//  3. The writer anchors the new line: a counter value of the new source
//     read after the pin, and the clock's value there, never less than V
//     (see anchorFunc).
//  4. Publish the new line.
//
// Readers that finish on the old bank read their counter before step 1
// became visible (see latch), hence before the pin, so they return at most
// V. Readers of the freezer bank return V. Readers of the new bank read
// the new counter after the anchor's counter value was read, so they
// return at least the anchor's value, which is at least V. This holds for
// any rate, faster or slower, any granularity of either counter, and any
// pause of the writer: no horizon is assumed. While a writer is stopped
// between steps 1 and 4, time stands still for readers; after step 4 it
// goes on from where the anchor puts it, at the new counter's pace.
//
// What the anchor must also get right is where the new line starts. For
// the same counter (a new rate for it) the new line starts at the pinned
// counter value itself, exactly. For two different counters, their
// relation is measured after the pin (relateAnchor), so a writer delayed
// anywhere, a slow Read included, loses no time: the clock goes on from
// the old line's value at the moment the counters were related.

// Register switches the clock to src, keeping time continuous: the new
// counter takes over from the exact value the old one had reached.
//
// A src whose Rate is lower than the current source's is refused with
// ErrSlowerSource (the kernel's "rate wins" rule); an equal or higher Rate
// replaces the current source. An invalid src (a Read that panics
// included, whatever its Rate) is refused with ErrInvalidSource, and a
// closed clock refuses with ErrClosed; a refused Register changes
// nothing.
//
// Register never makes time go back, wherever the writer is stopped (the
// old counter is frozen first, and until the new one takes over Now
// returns the value it froze at), and loses none of the time it takes:
// the two counters are related after the old one is frozen. A src whose
// Read panics is refused with ErrInvalidSource, the clock unchanged; a
// panic of the current source's Read during the switch leaves the clock
// unchanged too, and returns an error wrapping ErrFault. On
// the default clock, a Register ends the background calibration and
// watch of the hardware counter; on a clock made with WithReference,
// they move to src.
func (c *Clock) Register(src Source) error {
	c = c.orDefault()
	conv, err := newConversion(src)
	if err != nil {
		return err
	}
	if err := c.lockWriter(format.Sprintf("Register(%q)", src.Name)); err != nil {
		return err
	}
	defer c.unlock()
	if !ownCode(src.Read) {
		c.nameWriterLocked() // src's Read runs under the lock too
	}
	if src.Rate < c.st.declared {
		// A src whose Read panics is invalid whatever its rate: it is
		// read before the rate refuses it. (A faster src is read first
		// thing in the switch, before anything changes.)
		var err error
		c.guard(format.Sprintf("Register(%q)", src.Name), func() { _, err = readOnce(src) }, nil)
		if err != nil {
			return err
		}
		return format.Errorf("%w: %q runs at %d Hz, the current %q at %d Hz", ErrSlowerSource, src.Name, src.Rate, c.st.src.Name, c.st.declared)
	}
	endTrack, undo := c.st.policy.registerLocked(src, c.st.track)
	if tr := c.st.track; endTrack {
		c.st.track = nil
		undoPolicy := undo
		undo = func() { c.st.track = tr; undoPolicy() }
	}
	switched := false
	defer func() {
		if !switched { // refused, or the goroutine exits (see goexit)
			undo()
		}
	}()
	if err := c.switchLocked(src, conv, rating{hz: float64(src.Rate), origin: hwcounter.RateDeclared}); err != nil {
		return err
	}
	switched = true
	c.st.declared = src.Rate
	c.adoptExactLocked(src)
	if c.st.track != nil {
		// A clock made by New with a reference: calibration and the
		// watch move to src.
		c.st.track.src, c.st.track.adopted, c.st.track.restart = src, true, true
		c.kick()
	}
	return nil
}

// anchorFunc returns where a new line starts, given the pinned old
// counter value and the old line's value there, V (ns and remainder, in
// the old line's shift): a value cyc of the new counter read after the
// pin, and the clock's value at cyc (in the old line's shift), never less
// than V; or, with hold, a value at which the clock stands still (a
// constant line, as a suspended clock's), never less than V either.
type anchorFunc func(pinnedCyc uint64, ns int64, frac uint64) (cyc uint64, atNs int64, atFrac uint64, hold bool)

// sameCounterAnchor starts the new line at the pinned counter value and
// V: for a new rate of the same counter nothing is lost, not even the
// nanoseconds between two reads.
func sameCounterAnchor(pinnedCyc uint64, ns int64, frac uint64) (uint64, int64, uint64, bool) {
	return pinnedCyc, ns, frac, false
}

// relateSamples is how many (old, new, old) reads relateAnchor takes.
const relateSamples = 8

// relateAnchor anchors a new counter against the old line: it reads the
// old counter, the new one, and the old one again, several times, and
// takes the narrowest bracket: the new counter's value there corresponds
// to the old line's value at the bracket's midpoint. The reads happen
// after the pin, so however long the writer was stopped before them
// (preempted, in a slow Read) the old line has gone on counting, and the
// new line goes on from there. The error is the old counter's resolution
// plus half the bracket.
func relateAnchor(old line, next func() uint64) anchorFunc {
	return func(_ uint64, ns int64, frac uint64) (uint64, int64, uint64, bool) {
		bestWidth, oldCyc, nextCyc := ^uint64(0), uint64(0), uint64(0)
		for i := 0; i < relateSamples; i++ {
			before := blamed(false, old.read)
			n := next()
			after := blamed(false, old.read)
			// A later sample wins ties: it is the freshest.
			if width := (after - before) & old.conv.mask; width <= bestWidth {
				bestWidth, oldCyc, nextCyc = width, before+width/2, n
			}
		}
		// The old counter only went on since the pin, so its line's value
		// there is at least V; max keeps that true for a counter that
		// stepped back.
		atNs, atFrac := old.at(oldCyc)
		if atNs > ns || atNs == ns && atFrac > frac {
			ns, frac = atNs, atFrac
		}
		return nextCyc, ns, frac, false
	}
}

// switchLocked makes src, with conversion conv and rate, the clock's
// source: a new rate of the same counter anchors at the pinned value, a
// different counter is related to the old one (relateAnchor). A clock
// that stands still (see tracker.hold) reads no counter: its line is
// related to src as another counter's is, and src goes on from the
// value it stands at.
func (c *Clock) switchLocked(src Source, conv conversion, rate rating) error {
	anchor := relateAnchor(c.st.cur, src.Read)
	if funcPtr(src.Read) == funcPtr(c.st.cur.read) && conv.mask == c.st.conv.mask {
		anchor = sameCounterAnchor
	}
	return c.switchAnchoredLocked(src, conv, rate, anchor)
}

// switchAnchoredLocked makes src the clock's source, its line starting
// where anchor puts it. src is read once before anything changes, and a
// Read that panics, then or during the switch, leaves the clock exactly
// as it was: the error wraps ErrInvalidSource and carries the panic
// value. A panic of the current source's Read (the old counter, read to
// pin and relate it) leaves the clock as it was too; the error then
// wraps ErrFault, names that source, and Info counts the fault.
func (c *Clock) switchAnchoredLocked(src Source, conv conversion, rate rating, anchor anchorFunc) (err error) {
	// The same counter (a new rate for it, a re-anchoring) is the current
	// source: a panic of its Read is a fault, not an invalid Source.
	same := funcPtr(src.Read) == funcPtr(c.st.src.Read)
	before, wasHeld := c.st.cur, c.st.held
	r := c.guard("switch to "+src.Name, func() {
		if _, err = readOnce(src); err != nil {
			if p, ok := asPanic(err); same && ok {
				c.recordFaultLocked("switch to "+src.Name, p.v)
				err = format.Errorf("%w: %q: Read panicked before the switch: %v", ErrFault, src.Name, p.v)
			}
			return
		}
		if c.st.suspended {
			c.publishLocked(frozenLine(c.st.cur, conv))
		} else {
			c.switchLine(src.Read, conv, anchor)
			// A line that stands still, or one that follows it, runs at
			// no pace the last one's says anything of.
			old := &c.st.conv
			if !same || wasHeld || c.st.held {
				old = nil
			}
			c.reratedLocked(old)
		}
		c.st.src, c.st.conv, c.st.rate = src, conv, rate
		c.st.writer.userSrc = !ownCode(src.Read)
		c.st.fold.due = time.Now().Add(conv.refreshPeriod())
		c.kick()
	}, func(r any) {
		// Readers saw at most the old line's value at the pin; the old
		// line read later is at least that. (c.st.held changes only once
		// the new line is published, after the last user code.)
		c.publishLocked(before)
		f, marked := r.(culprit)
		_, exited := r.(goexit)
		switch {
		case marked && f.reference:
			c.recordFaultLocked("reference, anchoring "+src.Name, f.v)
		case exited || marked || same: // an exit: a Read or the reference, either way undone
			c.recordFaultLocked("switch to "+src.Name, r)
		}
	})
	f, marked := r.(culprit)
	switch {
	case r == nil:
		return err
	case marked && f.reference:
		return format.Errorf("%w: the reference panicked while anchoring %q: %v", ErrFault, src.Name, f.v)
	case marked || same:
		return format.Errorf("%w: %q: Read panicked during the switch to %q: %v", ErrFault, c.st.src.Name, src.Name, faultValue(r))
	}
	return format.Errorf("%w %q: Read panicked: %v", ErrInvalidSource, src.Name, r)
}

// switchLine publishes a line on next with conversion conv, starting
// where anchor puts it, through steps 1 to 4 above; or, where the anchor
// holds, a constant line (readSuspended's, as a suspended clock's) at
// the value it gives, and records that the clock stands still.
func (c *Clock) switchLine(next func() uint64, conv conversion, anchor anchorFunc) {
	// The same counter goes on counting from where the old line's count
	// was at the anchor (see line.epochTotal); another counter's count
	// starts at its value there, and so does the count of a counter
	// that follows a line standing still (which read no counter).
	same := funcPtr(next) == funcPtr(c.st.cur.read) && conv.mask == c.st.cur.conv.mask
	pinnedCyc, ns, frac := c.freeze("switch")
	cyc, ns, frac, hold := anchor(pinnedCyc, ns, frac)
	// c.st.cur is the frozen old line: its epoch and count are the old
	// line's.
	ns, frac = rescaleFrac(ns, frac, c.st.cur.conv.shift, conv.shift)
	ln := line{read: next, conv: conv, epochCyc: cyc & conv.mask, epochNs: ns, frac: frac, epochTotal: cyc & conv.mask}
	if same {
		ln.epochTotal = c.st.cur.total(cyc)
	}
	if hold {
		ln.read, ln.epochCyc = readSuspended, 0 // a constant line
	}
	c.st.writer.step("switch.anchored")
	mono := runtimeNano()
	if conv.wraps() && !hold {
		// The anchor's counter value may be old by now: the writer can
		// have been stopped since it was read. Readers of a counter that
		// wraps must not find it in the negative zone, so fold it
		// forward, as Update would, just before publishing.
		cyc = next()
		mono = runtimeNano()
		ln.epochNs, ln.frac = ln.at(cyc)
		ln.epochTotal = ln.total(cyc)
		ln.epochCyc = cyc & conv.mask
	}
	c.publishLocked(ln)
	c.st.held = hold
	if tr := c.st.track; tr != nil && !hold {
		tr.holding = false // a stand-still ends with any line that moves
	}
	// The new line's epoch is its last fold: the next fold measures its
	// lateness from here, not from the old line's (see lateFold).
	c.st.fold.lastMono = mono
	c.st.writer.step("switch.published")
}

// freeze is steps 1 and 2 of the switch, shared with Suspend: it
// publishes the current line read through a freezer, pins it, and returns
// the pinned counter value and the line's value V there (in the current
// line's shift).
func (c *Clock) freeze(stepPrefix string) (pinnedCyc uint64, ns int64, frac uint64) {
	fz := c.newFreezer()
	frozen := c.st.cur
	frozen.read, frozen.frozen = fz.read, true
	c.publishLocked(frozen)
	c.st.writer.step(stepPrefix + ".frozen")
	pinnedCyc = blamed(false, fz.read)
	c.st.writer.step(stepPrefix + ".fixed")
	ns, frac = frozen.at(pinnedCyc)
	return pinnedCyc, ns, frac
}

// rescaleFrac re-expresses ns + frac*2^-from as ns' + frac'*2^-to,
// rounding up so that time never moves backwards.
func rescaleFrac(ns int64, frac uint64, from, to uint32) (int64, uint64) {
	frac = convertFrac(frac, from, to)
	if frac >= uint64(1)<<to {
		ns++
		frac -= uint64(1) << to
	}
	return ns, frac
}

// freezer is the stand-in read function of step 1 of the switch (and of
// Suspend): it pins the old counter at its first read after it was
// published. Only the old counter is ever read through it, so a reader
// that pins never calls a new source's Read (which could be slow, or
// panic).
//
// "After it was published" needs care: the writer stores the freezer in
// bank 1 before it increments seq, and a reader that loaded an odd seq
// during an earlier publication and was delayed can find it there first.
// Such a reader's seq check is bound to fail, but if it pinned the
// counter, readers still on the published bank could go on to read later
// values. So the freezer pins only once seq has reached armedAt, the
// value its publication gives seq; before that it reads the old counter
// without pinning.
//
// Pinning allocates nothing, so neither does a Now that does it: the pin
// is kept as 1 + the delta of the old counter from the frozen line's
// epochCyc, clamped as readers clamp it. A clamped delta is below the
// mask's negative zone, so 1 + delta never wraps to 0, which means "not
// pinned yet".
type freezer struct {
	old            func() uint64
	epochCyc, mask uint64 // the frozen line's
	seq            *atomic.Uint64
	armedAt        uint64
	pinned         atomic.Uint64
}

// newFreezer returns a freezer of the current line, armed by the
// publication the writer is about to make.
func (c *Clock) newFreezer() *freezer {
	return &freezer{old: c.st.cur.read, epochCyc: c.st.cur.epochCyc, mask: c.st.cur.conv.mask,
		seq: &c.latch.seq, armedAt: c.latch.seq.Load() + 1}
}

func (fz *freezer) read() uint64 {
	if p := fz.pinned.Load(); p != 0 {
		return fz.epochCyc + p - 1
	}
	if fz.seq.Load() < fz.armedAt {
		return fz.old()
	}
	delta := clampDelta((fz.old()-fz.epochCyc)&fz.mask, fz.mask)
	fz.pinned.CompareAndSwap(0, delta+1)
	return fz.epochCyc + fz.pinned.Load() - 1
}

// readSuspended is the stand-in read function of a suspended clock: a
// frozen line is anchored at counter 0 and always reads 0.
func readSuspended() uint64 { return 0 }

// frozenLine returns the constant line at ln's epoch value (epochNs plus
// remainder, which the caller has already evaluated), in conversion conv.
func frozenLine(ln line, conv conversion) line {
	ns, frac := rescaleFrac(ln.epochNs, ln.frac, ln.conv.shift, conv.shift)
	return line{read: readSuspended, conv: conv, epochNs: ns, frac: frac}
}

// Suspend freezes the clock: until Resume, Now returns the time the clock
// had reached when Suspend took effect, and the counter is not read at all
// (it may stop, reset or misbehave while the system sleeps). Suspend is
// idempotent; after Close it returns ErrClosed.
//
// The value it freezes at is the first reading of the counter taken once
// readers can see the freeze, so no reader that ran before Suspend took
// effect can have seen a later time. A Read that panics there leaves the
// clock running on its counter as before, never behind what a reader saw,
// and returns an error wrapping ErrFault.
//
// On the default clock, Suspend, Resume and Register are for the main
// package of a program that owns the process's notion of time (a system
// that really sleeps, a test binary); a library must not call them.
func (c *Clock) Suspend() (err error) {
	c = c.orDefault()
	if locked, err := c.lockWriterUnless("Suspend", true); !locked {
		return err
	}
	defer c.unlock()
	before := c.st.cur
	return c.faultError("Suspend", c.guard("Suspend", func() {
		frozen := c.st.cur
		_, frozen.epochNs, frozen.frac = c.freeze("suspend")
		c.publishLocked(frozenLine(frozen, c.st.conv))
		c.st.suspended = true
		// A stand-still ends: Resume is the caller's word, and the watch
		// starts afresh there.
		c.st.held = false
		if tr := c.st.track; tr != nil {
			tr.holding = false
		}
		c.st.writer.step("suspend.published")
	}, func(r any) {
		c.publishLocked(before)
		c.recordFaultLocked("Suspend", r)
	}))
}

// Resume restarts a suspended clock: time continues from the value Now
// returned while suspended, and the suspended interval is not counted.
// Resume is idempotent; after Close it returns ErrClosed. A Read that
// panics leaves the clock suspended, as it was, and returns an error
// wrapping ErrFault: call Resume again.
func (c *Clock) Resume() (err error) {
	c = c.orDefault()
	if locked, err := c.lockWriterUnless("Resume", false); !locked {
		return err
	}
	defer c.unlock()
	// Anchoring at a counter value read before the publication means
	// every reader of the new line reads at least V.
	var cyc uint64
	if r := c.guard("Resume", func() { cyc = c.st.src.Read() }, nil); r != nil {
		return c.faultError("Resume", r)
	}
	// The count starts afresh too (see line.epochTotal): the counter may
	// have reset, stopped or run on while suspended.
	c.publishLocked(line{read: c.st.src.Read, conv: c.st.conv, epochCyc: cyc & c.st.conv.mask, epochNs: c.st.cur.epochNs, frac: c.st.cur.frac, epochTotal: cyc & c.st.conv.mask})
	c.st.suspended = false
	c.st.fold.lastMono = runtimeNano() // the suspended interval is not the counter's
	c.st.fold.due = time.Now().Add(c.st.conv.refreshPeriod())
	if c.st.track != nil {
		// The counter may have reset, stopped or run on while suspended:
		// calibration and the watch start afresh.
		c.st.track.restart = true
		c.kick()
	}
	c.st.writer.step("resume.published")
	return nil
}
