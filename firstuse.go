package schedclock

import "time"

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
	// wake-up taken here for another reason is not lost.
	chosen := make(chan struct{})
	go func(w clockRef, st *clockState) {
		for {
			select {
			case <-chosen:
				return
			case <-st.loop.wake:
				startCoarse(w, st)
			}
		}
	}(weakClock(c), c.st)
	c.chooseHardware()
	close(chosen)
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
