package schedclock

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

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

// read is the page's time in ns, ok false when the page says not to use
// it (stable bit clear, Hyper-V sequence 0) or kept changing under the
// reader (see internal/pvclock's maxTries).
func (p *paravirtPage) read() (uint64, bool) {
	if p.hv != nil {
		return p.hv.ReadWith(pvclock.TSC)
	}
	return pvclock.Read(p.pv)
}

// state says what the page holds now: "" while it can be read, else why
// not, and the evidence either way.
func (p *paravirtPage) state() (untrusted, evidence string) {
	_, ok := p.read()
	if p.hv != nil {
		h := p.hv.Load()
		evidence = fmt.Sprintf("Hyper-V TSC page at %#x in %s, sequence %d", p.loc.Hyperv, p.loc.Mapping, h.Sequence)
		if !ok {
			untrusted = fmt.Sprintf("the Hyper-V TSC page is invalid (sequence %d)", h.Sequence)
		}
		return untrusted, evidence
	}
	v := p.pv.Load()
	evidence = fmt.Sprintf("pvclock page at %#x in %s, version %d, flags %#x", p.loc.Pvclock, p.loc.Mapping, v.Version, v.Flags)
	switch {
	case !v.Stable():
		untrusted = fmt.Sprintf("PVCLOCK_TSC_STABLE_BIT is clear (flags %#x)", v.Flags)
	case !ok:
		untrusted = fmt.Sprintf("the pvclock page's version kept changing (now %d)", v.Version)
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
		return nil, fmt.Errorf("%w %q: %s", ErrUnsupported, "paravirt", noAsmReason("amd64"))
	}
	cs := kernel.Clocksource()
	maps, err := pvclock.Maps()
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrUnsupported, "paravirt", err)
	}
	loc, err := pvclock.Locate(maps, pvclock.KernelRelease())
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrUnsupported, "paravirt", err)
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
				return nil, fmt.Errorf("%w %q: PVCLOCK_TSC_STABLE_BIT is clear (flags %#x, version %d, in %s)", ErrUntrusted, k.name, v.Flags, v.Version, loc.Mapping)
			}
		}
		if err == nil {
			return p, nil
		}
		refusals = append(refusals, fmt.Errorf("%w %q: %v", ErrUnsupported, k.name, err))
	}
	if len(refusals) == 0 {
		return nil, fmt.Errorf("%w %q: the kernel's clocksource is %q, not a paravirtual clock (kvm-clock, xen, hyperv_clocksource_tsc_page)", ErrUnsupported, "paravirt", cs)
	}
	return nil, errors.Join(refusals...)
}

// paravirtSource is one Source on the page: the page's ns while it can
// be read, else CLOCK_MONOTONIC_RAW moved onto the page's timeline.
type paravirtSource struct {
	page *paravirtPage
	// rawOffset is page ns - CLOCK_MONOTONIC_RAW ns, measured at
	// creation as an upper bound: the page's reading minus the raw read
	// just before it, from the tightest of several brackets. On a kernel
	// whose clocksource is the page's clock the raw clock is the page's
	// time plus a constant (a 1 GHz clocksource, whose mult is a power of
	// two), so raw + rawOffset is never below a page reading made at the
	// same instant, and above it by at most the bracket's width.
	rawOffset int64
	// fellBack is set, for good, by the first read the page refused: from
	// then on every read is raw + rawOffset. Going back to the page would
	// step back by up to the bracket's width; the default clock drops
	// the source when the page's evidence goes (pvclockEvidence).
	fellBack atomic.Bool
	raw      func() int64 // CLOCK_MONOTONIC_RAW (rawNow; tests give their own)
}

// offsetBrackets is how many raw/page/raw brackets the offset
// measurement takes the tightest of.
const offsetBrackets = 32

// newParavirtSource measures the page's offset from raw (rawNow, or a
// test's stand-in) and returns the Source's state.
func newParavirtSource(p *paravirtPage, raw func() int64) (*paravirtSource, error) {
	best, width := int64(0), int64(-1)
	for range offsetBrackets {
		r0 := raw()
		ns, ok := p.read()
		r1 := raw()
		if !ok {
			why, evidence := p.state()
			return nil, fmt.Errorf("%w %q: %s (%s)", ErrUntrusted, p.kind.name, why, evidence)
		}
		if w := r1 - r0; width < 0 || w < width {
			best, width = int64(ns)-r0, w
		}
	}
	return &paravirtSource{page: p, rawOffset: best, raw: raw}, nil
}

// read is the Source's Read. The page read orders itself against the
// latch's re-check of seq: its version re-check is a load whose address
// depends on the TSC value, and x86 keeps the caller's later loads after
// it.
func (s *paravirtSource) read() uint64 {
	if !s.fellBack.Load() {
		if ns, ok := s.page.read(); ok {
			return ns
		}
		s.fellBack.Store(true)
	}
	v := uint64(s.raw() + s.rawOffset)
	orderAfter(v) // the latch's re-check of seq must follow the read
	return v
}

// Paravirt returns the hypervisor's clock as a Source: the page the
// kernel's vDSO reads clock_gettime from on a paravirtual clock
// (kvm-clock's and Xen's pvclock page, Hyper-V's reference TSC page),
// read in user space the way the vDSO reads it (the page's version
// protocol, LFENCE; RDTSC, the hypervisor's scale with a 128-bit
// product), 1 GHz and 64 bits, its Read returning the page's
// nanoseconds: the kernel's kvm-clock (or Xen, Hyper-V) time. Its Name
// says which clock it is, e.g. "kvm-clock (pvclock, stable)".
//
// It is offered only where the kernel's clocksource is that clock and
// the page is mapped in this process, plausible and, for the pvclock
// page, carries PVCLOCK_TSC_STABLE_BIT (the hypervisor's promise that
// one page gives a monotonic clock on every vCPU); the page is never
// loaded from before a copy of it proved all that. Off amd64, in a
// purego or non-gc build, where the kernel runs on another clocksource,
// maps no page or maps it in a layout this package does not know, err
// wraps ErrUnsupported; where the stable bit is clear, ErrUntrusted. The
// message says exactly why.
//
// Should the page refuse a read later (the stable bit cleared, a
// Hyper-V page marked invalid), Read goes on, for good, from
// CLOCK_MONOTONIC_RAW plus the offset from the page's time measured
// when Paravirt was called: never below a reading the page gave, and
// above the page's own time by at most that measurement's bracket (tens
// of ns).
func Paravirt() (Source, error) {
	p, err := foundParavirt()
	if err != nil {
		return Source{}, err
	}
	if p.pv != nil {
		if err := sharePvclock(p); err != nil {
			return Source{}, err
		}
		return Source{Name: p.kind.name, Read: readPvclock, Bits: 64, Rate: 1_000_000_000}, nil
	}
	s, err := newParavirtSource(p, rawNow)
	if err != nil {
		return Source{}, err
	}
	return Source{Name: p.kind.name, Read: s.read, Bits: 64, Rate: 1_000_000_000}, nil
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
// exact (RateNanoseconds): the default clock watches it against
// CLOCK_MONOTONIC_RAW but never refines it.
func probePvclock() (src Source, origin RateOrigin, errPPM float64, err error) {
	src, err = Paravirt()
	return src, RateNanoseconds, 0, err
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
	why, evidence := p.state()
	if why == "" {
		return ""
	}
	return why + " (" + evidence + ")"
}

// pvclockDescription is the page's evidence for Info: which page, where,
// its version and flags (or sequence), and whether it can be read.
func pvclockDescription() string {
	p, err := foundParavirt()
	if err != nil {
		return err.Error()
	}
	why, evidence := p.state()
	if why != "" {
		return evidence + ": " + why
	}
	if p.hv != nil {
		return evidence + " (" + p.loc.Layout + ")"
	}
	return evidence + " (stable; " + p.loc.Layout + ")"
}

// pvclockCounter is the paravirtual clock's entry for the default
// clock's table: trusted on the kernel's word (its clocksource is the
// page's clock) and the page's own evidence (the stable bit), both
// followed for life.
var pvclockCounter = counter{
	arch:     "amd64",
	probe:    probePvclock,
	verdict:  pvclockVerdict,
	evidence: pvclockEvidence,
	describe: pvclockDescription,
}
