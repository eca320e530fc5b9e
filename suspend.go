package schedclock

// Suspend freezes the clock: until Resume, Now returns the time the clock
// had reached when Suspend took effect, and the counter is not read at all
// (it may stop, reset or misbehave while the system sleeps). Readers go
// through a stand-in read function, so the read path has no
// suspended-branch. Suspend is idempotent, and does nothing after Close.
//
// The freeze point is fixed the way a switch's is (see switch.go): by the
// first counter read after the freeze is published, so no reader that ran
// before Suspend took effect can have seen a later time.
func (c *Clock) Suspend() {
	if c.clockState == nil {
		return // a zero Clock
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stoppedLocked() || c.suspended {
		return
	}
	frozen := c.cur
	_, frozen.epochNs, frozen.frac = c.freeze("suspend")
	c.publishLocked(frozenLine(frozen, c.conv))
	c.suspended = true
	c.step("suspend.published")
}

// Resume restarts a suspended clock: time continues from the value Now
// returned while suspended, and the suspended interval is not counted.
// Resume is idempotent, and does nothing after Close.
func (c *Clock) Resume() {
	if c.clockState == nil {
		return // a zero Clock
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stoppedLocked() || !c.suspended {
		return
	}
	// Anchoring at a counter value read before the publication means
	// every reader of the new line reads at least V.
	// Anchoring at a counter value read before the publication means
	// every reader of the new line reads at least V.
	cyc := c.src.Read()
	c.publishLocked(line{read: c.src.Read, conv: c.conv, epochCyc: cyc & c.conv.mask, epochNs: c.cur.epochNs, frac: c.cur.frac})
	c.suspended = false
	if c.track != nil {
		// The counter may have reset, stopped or run on while suspended:
		// calibration and the watch start afresh.
		c.track.restart = true
		c.kick()
	}
	c.step("resume.published")
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
