package schedclock

import "time"

// Suspend and Resume: a suspended clock publishes a constant line whose
// read function is a stand-in (readSuspended) that never touches the
// counter, which may stop, reset or misbehave while the system sleeps.
// Suspend freezes through the switch protocol (switch.go's freezer), so
// that no reader that ran before it took effect saw a later time.

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
