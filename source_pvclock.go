package schedclock

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/schedclock/schedclock/internal/format"
	"github.com/schedclock/schedclock/internal/hwcounter"
	"github.com/schedclock/schedclock/internal/kernel"
	"github.com/schedclock/schedclock/internal/pvclock"
)

// A paravirtual clock is the hypervisor's own scale of the TSC, published
// in a page the kernel maps into every process once its vDSO reads time
// from it: kvm-clock's and Xen's pvclock page, Hyper-V's reference TSC
// page. The vDSO serves clock_gettime from it only while the hypervisor
// promises a stable TSC, and so does this package.

// paravirtKind is one kind of paravirtual clock: the kernel clocksource
// that runs on it, the page it reads, and the Source's name.
type paravirtKind struct {
	clocksource string // current_clocksource's name for it; "" matches a kernel whose clocksource cannot be read
	name        string
	hyperv      bool // the Hyper-V TSC page, not the pvclock page
}

// paravirtKinds lists the paravirtual clocks, as counter.go lists the
// counters: Paravirt walks it and never asks a name.
var paravirtKinds = []paravirtKind{
	{clocksource: "kvm-clock", name: "kvm-clock (pvclock, stable)"},
	{clocksource: "xen", name: "xen (pvclock, stable)"},
	{clocksource: "hyperv_clocksource_tsc_page", name: "hyperv (TSC page)", hyperv: true},
	{clocksource: "", name: "pvclock (stable; kernel clocksource unknown)"},
	{clocksource: "", name: "hyperv (TSC page; kernel clocksource unknown)", hyperv: true},
}

// paravirtPage is the clock page this process found and probed.
type paravirtPage struct {
	kind paravirtKind
	loc  pvclock.Location
	pv   *pvclock.Page       // nil for a Hyper-V page
	hv   *pvclock.HypervPage // nil for a pvclock page
}

// read is the page's time in ns and the version (sequence) it was read
// under, ok false when the page says not to use it (stable bit clear,
// Hyper-V sequence 0), holds a scale no hypervisor writes, or kept
// changing under the reader (see internal/pvclock's maxTries).
func (p *paravirtPage) read() (ns uint64, version uint32, ok bool) {
	if p.hv != nil {
		return p.hv.ReadWith(pvclock.TSC)
	}
	return pvclock.Read(p.pv)
}

// version is the page's version (sequence) now.
func (p *paravirtPage) version() uint32 {
	if p.hv != nil {
		return p.hv.Load().Sequence
	}
	return p.pv.Load().Version
}

// snapshot returns the page's time as a function of the TSC, for the
// version (sequence) given, if the page holds it now; ok false while
// the page cannot give one (an update in flight, a version that moved).
func (p *paravirtPage) snapshot(version uint32) (timeAt func(tsc uint64) uint64, ok bool) {
	if p.hv != nil {
		h, ok := p.hv.Snapshot()
		return func(tsc uint64) uint64 { return h.Nanoseconds(tsc) & mask63 }, ok && h.Sequence == version
	}
	v, ok := p.pv.Snapshot()
	return v.Time, ok && v.Version == version
}

// state says what the page holds now: "" while it can be read, else why
// not, and the evidence either way.
func (p *paravirtPage) state() (untrusted, evidence string) {
	_, _, ok := p.read()
	if p.hv != nil {
		h := p.hv.Load()
		evidence = format.Sprintf("Hyper-V TSC page at %#x in %s, sequence %d", p.loc.Hyperv, p.loc.Mapping, h.Sequence)
		switch {
		case ok:
		case h.Sequence != 0 && h.Scale == 0:
			untrusted = "the Hyper-V TSC page's tsc_scale is 0"
		default:
			untrusted = format.Sprintf("the Hyper-V TSC page is invalid (sequence %d)", h.Sequence)
		}
		return untrusted, evidence
	}
	v := p.pv.Load()
	evidence = format.Sprintf("pvclock page at %#x in %s, version %d, flags %#x", p.loc.Pvclock, p.loc.Mapping, v.Version, v.Flags)
	switch {
	case ok:
	case !v.Stable():
		untrusted = format.Sprintf("PVCLOCK_TSC_STABLE_BIT is clear (flags %#x)", v.Flags)
	case !v.Scalable():
		untrusted = format.Sprintf("the pvclock page's scale is not time (tsc_to_system_mul %d, tsc_shift %d)", v.Mul, v.Shift)
	default:
		untrusted = format.Sprintf("the pvclock page's version kept changing (now %d)", v.Version)
	}
	return untrusted, evidence
}

// foundParavirt is the page of this process, looked for once: where the
// kernel maps it does not change, and once mapped it stays readable
// (internal/pvclock.ProbePvclock says why).
func foundParavirt() (*paravirtPage, error) {
	f := foundParavirtOnce.get()
	return f.page, f.err
}

var foundParavirtOnce = lazy[paravirtFound]{make: func() paravirtFound {
	p, err := findParavirt()
	return paravirtFound{p, err}
}}

// paravirtFound is what findParavirt returned.
type paravirtFound struct {
	page *paravirtPage
	err  error
}

// findParavirt finds the page of the kind the kernel's clocksource
// names, and proves it mapped and plausible before anything loads from
// it.
func findParavirt() (*paravirtPage, error) {
	if !pvclock.Supported {
		return nil, format.Errorf("%w %q: %s", ErrUnsupported, "paravirt", hwcounter.NoAsmReason("amd64"))
	}
	cs := kernel.Clocksource()
	maps, err := pvclock.Maps()
	if err != nil {
		return nil, format.Errorf("%w %q: %v", ErrUnsupported, "paravirt", err)
	}
	loc, err := pvclock.Locate(maps, pvclock.KernelRelease())
	if err != nil {
		return nil, format.Errorf("%w %q: %v", ErrUnsupported, "paravirt", err)
	}
	var refusals []error
	for _, k := range paravirtKinds {
		if k.clocksource != cs {
			continue
		}
		p := &paravirtPage{kind: k, loc: loc}
		var err error
		if k.hyperv {
			p.hv, _, err = pvclock.ProbeHyperv(loc.Hyperv)
		} else {
			var v pvclock.Pvclock
			p.pv, v, err = pvclock.ProbePvclock(loc.Pvclock)
			if err == nil && !v.Stable() {
				// The vDSO does not use an unstable page either.
				return nil, format.Errorf("%w %q: PVCLOCK_TSC_STABLE_BIT is clear (flags %#x, version %d, in %s)", errUntrusted, k.name, v.Flags, v.Version, loc.Mapping)
			}
		}
		if err == nil {
			return p, nil
		}
		refusals = append(refusals, format.Errorf("%w %q: %v", ErrUnsupported, k.name, err))
	}
	if len(refusals) == 0 {
		return nil, format.Errorf("%w %q: the kernel's clocksource is %q, not a paravirtual clock (kvm-clock, xen, hyperv_clocksource_tsc_page)", ErrUnsupported, "paravirt", cs)
	}
	return nil, joinRefusals(refusals)
}

// paravirtSource is one Source on the page: the page's ns while the page
// is consistent, CLOCK_MONOTONIC_RAW moved onto the page's timeline while
// it is not, and the page again once it is.
//
// A page is consistent when it can be read (the stable bit, a scale a
// hypervisor writes, a version that settles within maxTries) and its
// time agrees with the reference's: on a kernel whose clocksource is the
// page's clock, CLOCK_MONOTONIC_RAW is the page's time plus a constant (a
// 1 GHz clocksource, whose mult is a power of two), so a page that runs
// ahead or behind it by more than pageTolerance is not the hypervisor's
// time, whatever its version says (a test's garbage, a torn write). The
// check runs once per page version, off the read path: state holds the
// version that passed it, and the read path (Clock.Now's inline read
// included) uses the page only while the page holds that version, so a
// new version sends the reader here, at the very next read.
//
// Every reading is at least floor, and every change of state raises
// floor, before it is published, to the largest reading the state it
// leaves could have handed out: the page's time under the version it
// leaves, at a TSC read after the page stopped holding it (the
// version's snapshot, accepted), or the fallback readings themselves
// (each raises floor before it is returned). So no switch between page
// and reference, or between two versions of the page, ever steps back,
// whichever way the two timelines differ, and however a reader is
// delayed.
type paravirtSource struct {
	// state is the page version whose reading was checked (below
	// 2^32: readers use the page while it holds that version), or
	// onFallback, or unchecked. Clock.Now's inline read compares the page's version
	// with it (now_amd64.s); keep it first.
	state atomic.Uint64
	// floor is the least reading any reader may hand out (see above);
	// the inline read compares its reading with it.
	floor atomic.Uint64
	// accepted is the snapshot of the version in state: the page's time
	// as a function of the TSC, for the raise of floor when the source
	// leaves that version.
	accepted atomic.Pointer[acceptedVersion]
	// nextProbe is the reference's time before which a reader on the
	// fallback does not try the page again.
	nextProbe atomic.Int64
	// events is what Info reports of the source's falls back and returns.
	events atomic.Pointer[paravirtEvents]
	page   *paravirtPage
	// rawOffset is page ns - CLOCK_MONOTONIC_RAW ns, measured at
	// creation as an upper bound: the page's reading minus the raw read
	// just before it, from the tightest of several brackets, rawWidth
	// wide. raw + rawOffset is never below a page reading made at the
	// same instant, and above it by at most rawWidth.
	rawOffset, rawWidth int64
	raw                 func() int64 // CLOCK_MONOTONIC_RAW (rawNow; tests give their own)
}

// acceptedVersion is one page version's time as a function of the TSC.
type acceptedVersion struct {
	version uint32
	timeAt  func(tsc uint64) uint64
}

// paravirtEvents is the record of a source's falls back and returns,
// replaced whole at each (they are rare).
type paravirtEvents struct {
	falls, returns int
	lastWhy        string    // why the last fall back
	lastAt, backAt time.Time // when the last fall back and the last return
	onFallback     bool
}

const (
	// onFallback is state while readers read the reference.
	onFallback = 1 << 32
	// unchecked is state before the first version is checked.
	unchecked = 2 << 32
	// pageTolerance is how far a page version's time may be from the
	// reference's (rawOffset's bracket aside) and still be the
	// hypervisor's time; on a kernel on the page's clock the two agree to
	// the nanosecond.
	pageTolerance = 50 * time.Microsecond
	// probeEvery is how often a reader on the fallback tries the page
	// again: a transient costs about that long on the reference.
	probeEvery = 50 * time.Microsecond
	// maxStateRounds bounds the read's changes of state; past it, the
	// read falls back (a page changing faster than it can be checked).
	maxStateRounds = 8
	// mask63 is the width of the Source's values (see Paravirt).
	mask63 = 1<<63 - 1
)

// offsetBrackets is how many raw/page/raw brackets the offset
// measurement takes the tightest of.
const offsetBrackets = 32

// newParavirtSource measures the page's offset from raw (rawNow, or a
// test's stand-in) and returns the Source's state, on the page.
func newParavirtSource(p *paravirtPage, raw func() int64) (*paravirtSource, error) {
	best, width := int64(0), int64(-1)
	var version uint32
	for range offsetBrackets {
		r0 := raw()
		ns, v, ok := p.read()
		r1 := raw()
		if !ok {
			why, evidence := p.state()
			return nil, format.Errorf("%w %q: %s (%s)", errUntrusted, p.kind.name, why, evidence)
		}
		if w := r1 - r0; width < 0 || w < width {
			best, width, version = int64(ns)-r0, w, v
		}
	}
	s := &paravirtSource{page: p, rawOffset: best, rawWidth: width, raw: raw}
	s.state.Store(unchecked)
	s.accept(unchecked, version) // else the page moved on: the first read checks the version it finds
	return s, nil
}

// read is the Source's Read. The page read orders itself against the
// latch's re-check of seq: its version re-check is a load whose address
// depends on the TSC value, and x86 keeps the caller's later loads after
// it.
func (s *paravirtSource) read() uint64 {
	for range maxStateRounds {
		st := s.state.Load()
		if st == onFallback {
			return s.readFallback()
		}
		ns, version, ok := s.page.read()
		if ok && uint64(version) == st {
			return max(ns, s.floor.Load())
		}
		if !ok {
			why, _ := s.page.state()
			s.fallBack(st, why)
			continue
		}
		// A version not checked yet.
		r0 := s.raw()
		ns, version, ok = s.page.read()
		r1 := s.raw()
		if why := s.inconsistent(ns, ok, r0, r1); why != "" {
			s.fallBack(st, why)
			continue
		}
		if !s.accept(st, version) {
			continue
		}
		return max(ns, s.floor.Load())
	}
	s.fallBack(s.state.Load(), "the page's state kept changing under the reader")
	return s.readFallback()
}

// inconsistent says why a page reading ns (ok false: no reading), made
// between the reference's readings r0 and r1, is not the hypervisor's
// time, or "".
func (s *paravirtSource) inconsistent(ns uint64, ok bool, r0, r1 int64) string {
	if !ok {
		why, _ := s.page.state()
		return why
	}
	lo := r0 + s.rawOffset - s.rawWidth - int64(pageTolerance)
	hi := r1 + s.rawOffset + int64(pageTolerance)
	switch {
	case int64(ns) > hi:
		return format.Sprintf("the page's time runs %v ahead of %s", time.Duration(int64(ns)-(r1+s.rawOffset)), rawClockName)
	case int64(ns) < lo:
		return format.Sprintf("the page's time runs %v behind %s", time.Duration(r0+s.rawOffset-int64(ns)), rawClockName)
	}
	return ""
}

// accept moves the source from state from onto the page at version,
// if the page still holds it: floor is raised past what the state left
// could have handed out, then the version's snapshot and the state are
// published. It reports whether the source is on that version now.
func (s *paravirtSource) accept(from uint64, version uint32) bool {
	timeAt, ok := s.page.snapshot(version)
	if !ok {
		return false
	}
	s.raiseFloorLeaving(from)
	s.accepted.Store(&acceptedVersion{version: version, timeAt: timeAt})
	if !s.state.CompareAndSwap(from, uint64(version)) {
		return s.state.Load() == uint64(version)
	}
	if from == onFallback {
		s.record(func(e *paravirtEvents) {
			e.returns++
			e.backAt = time.Now()
			e.onFallback = false
		})
	}
	return true
}

// fallBack moves the source from state from to the reference, for why.
func (s *paravirtSource) fallBack(from uint64, why string) {
	if from == onFallback {
		return
	}
	s.raiseFloorLeaving(from)
	if s.state.CompareAndSwap(from, onFallback) {
		s.nextProbe.Store(s.raw() + int64(probeEvery))
		s.record(func(e *paravirtEvents) {
			e.falls++
			e.lastWhy = why
			e.lastAt = time.Now()
			e.onFallback = true
		})
	}
}

// raiseFloorLeaving raises floor past every reading made on the page
// version from (a state that is not a version leaves nothing to raise
// for: its readings raised floor themselves). A page reader under that
// version re-checked the version after its TSC read, before the page
// changed, before this TSC read: the version's time now bounds them all.
func (s *paravirtSource) raiseFloorLeaving(from uint64) {
	if a := s.accepted.Load(); a != nil && uint64(a.version) == from {
		s.raiseFloor(a.timeAt(pvclock.TSC()))
	}
}

// raiseFloor makes floor at least v.
func (s *paravirtSource) raiseFloor(v uint64) {
	for f := s.floor.Load(); v > f && !s.floor.CompareAndSwap(f, v); f = s.floor.Load() {
	}
}

// readFallback is a reading of the reference moved onto the page's
// timeline, never below floor (and raising it), and, every probeEvery,
// a try of the page, which puts the source back on it when it is
// consistent again.
func (s *paravirtSource) readFallback() uint64 {
	r := s.raw()
	v := max(uint64(r+s.rawOffset)&mask63, s.floor.Load())
	s.raiseFloor(v)
	if next := s.nextProbe.Load(); r >= next && s.nextProbe.CompareAndSwap(next, r+int64(probeEvery)) {
		s.probe()
	}
	orderAfter(v) // the latch's re-check of seq must follow the read
	return v
}

// probe tries the page once from the fallback: a page whose snapshot
// settles and whose time agrees with the reference's takes the source
// back.
func (s *paravirtSource) probe() {
	if _, ok := s.page.snapshot(s.page.version()); !ok {
		return // under update: no waiting here
	}
	r0 := s.raw()
	ns, version, ok := s.page.read()
	r1 := s.raw()
	if s.inconsistent(ns, ok, r0, r1) == "" {
		s.accept(onFallback, version)
	}
}

// record applies f to a copy of the events and publishes it.
func (s *paravirtSource) record(f func(*paravirtEvents)) {
	for {
		old := s.events.Load()
		e := paravirtEvents{}
		if old != nil {
			e = *old
		}
		f(&e)
		if s.events.CompareAndSwap(old, &e) {
			return
		}
	}
}

// status says what the source reads when not the page (reading: "on
// CLOCK_MONOTONIC_RAW since ...: why", "" on the page) and its falls
// back and returns, each with its time (history: "" while it never
// left the page).
func (s *paravirtSource) status() (reading, history string) {
	e := s.events.Load()
	if e == nil {
		return "", ""
	}
	if e.onFallback {
		reading = format.Sprintf("on %s since %s: %s", rawClockName, format.Stamp(e.lastAt), e.lastWhy)
	}
	history = format.Sprintf("%d falls back to %s, the last at %s: %s", e.falls, rawClockName, format.Stamp(e.lastAt), e.lastWhy)
	if e.returns > 0 {
		history += format.Sprintf("; %d returns to the page, the last at %s", e.returns, format.Stamp(e.backAt))
	}
	return reading, history
}

// Paravirt returns the hypervisor's clock as a Source: the page the
// kernel's vDSO reads clock_gettime from on a paravirtual clock
// (kvm-clock's and Xen's pvclock page, Hyper-V's reference TSC page),
// read in user space the way the vDSO reads it (the page's version
// protocol, LFENCE; RDTSC, the hypervisor's scale with a 128-bit
// product), 1 GHz and 63 bits (the vDSO's reading has its top bit
// cleared), its Read returning the page's nanoseconds: the kernel's
// kvm-clock (or Xen, Hyper-V) time. Its Name says which clock it is,
// e.g. "kvm-clock (pvclock, stable)".
//
// It is offered only where the kernel's clocksource is that clock and
// the page is mapped in this process, plausible and, for the pvclock
// page, carries PVCLOCK_TSC_STABLE_BIT (the hypervisor's promise that
// one page gives a monotonic clock on every vCPU); the page is never
// loaded from before a copy of it proved all that. Off amd64, in a
// purego or non-gc build, where the kernel runs on another clocksource,
// maps no page or maps it in a layout this package does not know, or
// where the stable bit is clear, err wraps ErrUnsupported. The message
// says exactly why.
//
// A TSC value below the one the page's last update was stamped with (a
// vCPU whose TSC reads slightly behind the one the update came from)
// moves the clock by nothing, as the kernel's vDSO treats it, rather
// than by a wrapped, huge amount. A page that cannot be read (the stable bit cleared, a
// scale no hypervisor writes, an update that does not settle within
// some 25 µs) or whose time, at a new version, disagrees with
// CLOCK_MONOTONIC_RAW by more than tens of µs is a fault, not time:
// Read goes on from CLOCK_MONOTONIC_RAW plus the page's offset from it
// measured when Paravirt was called, tries the page again every 50 µs
// and returns to it once it is consistent. No change between page and
// reference steps back: each reading is at least the largest the Source
// could have handed out before the change.
func Paravirt() (Source, error) {
	p, err := foundParavirt()
	if err != nil {
		return Source{}, err
	}
	return paravirtOn(p, sharePvclock)
}

// paravirtOn is Paravirt on page p, with share setting pvclockShared up
// on a pvclock page (sharePvclock; a test's synthetic page is shared by
// the test).
func paravirtOn(p *paravirtPage, share func(*paravirtPage) error) (Source, error) {
	if p.pv != nil {
		if err := share(p); err != nil {
			return Source{}, err
		}
		return Source{Name: p.kind.name, Read: readPvclock, Bits: 63, Rate: 1_000_000_000}, nil
	}
	s, err := newParavirtSource(p, rawNow)
	if err != nil {
		return Source{}, err
	}
	return Source{Name: p.kind.name, Read: s.read, Bits: 63, Rate: 1_000_000_000}, nil
}

// pvclockShared is the process's one Source state on its pvclock page,
// behind every Source Paravirt returns there: their Read is one
// package-level function, readPvclock, which Clock.Now's assembly
// recognises in a bank and inlines (now_amd64.s). page and src are
// written once, under pvclockShareOnce, before any Source with
// readPvclock exists, and only read afterwards.
var pvclockShared struct {
	page *pvclock.Page
	src  *paravirtSource
}

var (
	pvclockShareOnce sync.Once
	pvclockShareErr  error
)

// sharePvclock sets pvclockShared up on p, once; a failure (the page
// refused the offset measurement) is final, as the page's refusals are.
func sharePvclock(p *paravirtPage) error {
	pvclockShareOnce.Do(func() {
		s, err := newParavirtSource(p, rawNow)
		if err != nil {
			pvclockShareErr = err
			return
		}
		pvclockShared.page, pvclockShared.src = p.pv, s
	})
	return pvclockShareErr
}

// readPvclock is the Read of Paravirt's Sources on a pvclock page.
func readPvclock() uint64 { return pvclockShared.src.read() }

// probePvclock is Paravirt in the shape of the default clock's counter
// descriptors: the page's time is in ns by construction, so its rate is
// exact (hwcounter.RateNanoseconds): the default clock watches it against
// CLOCK_MONOTONIC_RAW but never refines it.
func probePvclock() (src hwcounter.Source, origin hwcounter.RateOrigin, errPPM float64, err error) {
	pv, err := Paravirt()
	return counterSource(pv), hwcounter.RateNanoseconds, 0, err
}

// pvclockVerdict is the kernel's word on the paravirtual clock: its
// clocksource must still be the one the page belongs to.
func pvclockVerdict() kernel.Verdict {
	want := paravirtKinds[0].clocksource
	if p, err := foundParavirt(); err == nil && p.kind.clocksource != "" {
		want = p.kind.clocksource
	}
	return kernel.ReadVerdict(kernel.ClocksourcePath, want)
}

// pvclockEvidence re-reads the page: "" while it can be read (the
// stable bit set, the Hyper-V page valid), else why not, with the page's
// flags and version.
func pvclockEvidence() string {
	p, err := foundParavirt()
	if err != nil {
		return err.Error()
	}
	return p.evidence()
}

// evidence is pvclockEvidence for page p.
func (p *paravirtPage) evidence() string {
	why, evidence := p.state()
	if why == "" {
		return ""
	}
	return why + " (" + evidence + ")"
}

// pvclockDescription is the page's evidence for Info: which page, where,
// its version and flags (or sequence), and whether it can be read (Info
// adds pvclockStatus, fresh).
func pvclockDescription() string {
	p, err := foundParavirt()
	if err != nil {
		return err.Error()
	}
	return p.description()
}

// description is pvclockDescription for page p.
func (p *paravirtPage) description() string {
	why, evidence := p.state()
	switch {
	case why != "":
		evidence += ": " + why
	case p.hv != nil:
		evidence += " (" + p.loc.Layout + ")"
	default:
		evidence += " (stable; " + p.loc.Layout + ")"
	}
	return evidence
}

// pvclockStatus is the status of the process's shared Source on the
// pvclock page (paravirtSource.status).
func pvclockStatus() (reading, history string) {
	if pvclockShared.src == nil {
		return "", ""
	}
	return pvclockShared.src.status()
}

// pvclockCounter is the paravirtual clock's entry for the default
// clock's table: trusted on the kernel's word (its clocksource is the
// page's clock) and the page's own evidence (the stable bit), both
// followed for life.
var pvclockCounter = hwcounter.Counter{
	Arch:     "amd64",
	Probe:    probePvclock,
	Verdict:  pvclockVerdict,
	Evidence: pvclockEvidence,
	Describe: pvclockDescription,
	Status:   pvclockStatus,
}
