package schedclock

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/schedclock/schedclock/internal/errata"
	"github.com/schedclock/schedclock/internal/measure"
)

// cntvctBits is the counter width the architecture guarantees: at least
// 56 bits before Armv8.6, 64 from it. Masking a 64-bit counter to 56 bits
// still gives a consistent 56-bit counter, so 56 is right everywhere.
const cntvctBits = 56

// cntfrqErrPPM is the error reported for the rate in CNTFRQ_EL0: firmware
// programs the nominal oscillator frequency, and the oscillator sits some
// tens of ppm from it. The rate is refined in the background anyway.
const cntfrqErrPPM = 50

// cntvctCounter is CNTVCT's entry in the default clock's table. The
// kernel keeps no watchdog on the arm64 generic timer (one system-wide
// counter), so its own check decides: the kernel's erratum workaround
// where this CPU needs one, and a read that costs no more than the
// portable source's (a counter the kernel traps falls back).
var cntvctCounter = descriptor{
	Arch:      "arm64",
	Probe:     probeCNTVCT,
	NoVerdict: "not consulted: the arm64 generic timer is one system-wide counter, and the kernel keeps no watchdog on it",
	Prepare:   prepareCNTVCT,
}

// prepareCNTVCT puts the kernel's erratum workaround, where this CPU needs
// one, in src's read (reading it needs the same workaround from user
// space as the kernel's: a few small file reads, cheap enough for the
// default clock's set-up), and returns the check of what that read costs.
func prepareCNTVCT(src Source) (Source, func(measures) (string, error)) {
	erratum := errata.Detect(os.DirFS("/"))
	if read := cntvctErratum(erratum.Erratum); read != nil {
		src.Read = read
	}
	return src, func(m measures) (string, error) {
		t := decideCNTVCT(erratum, src.Read, measureReadCost(src.Read, m.Portable))
		return t.String(), t.untrusted()
	}
}

// probeCNTVCT returns the arm64 virtual counter CNTVCT_EL0 as a Source,
// read with ISB before it and an ordering load after it (CNTVCT), at the
// frequency in CNTFRQ_EL0, with the origin and error of that rate; it
// never blocks. Off arm64, in a purego or non-gc build, err wraps
// ErrUnsupported; where CNTFRQ_EL0 reads 0 (firmware left it
// unprogrammed), errUntrusted. The message says exactly why.
func probeCNTVCT() (src Source, origin rateOrigin, errPPM float64, err error) {
	if !cntvctSupported {
		return Source{}, 0, 0, fmt.Errorf("%w %q: %s", ErrUnsupported, "cntvct", noAsmReason("arm64"))
	}
	// CNTFRQ_EL0 bits 63:32 are RES0.
	rate := cntfrq() & 0xffff_ffff
	if rate == 0 {
		return Source{}, 0, 0, fmt.Errorf("%w %q: CNTFRQ_EL0 reads 0 (firmware did not program the counter frequency)", errUntrusted, "cntvct")
	}
	return Source{Name: "cntvct", Read: cntvctReader(), Bits: cntvctBits, Rate: rate}, rateCNTFRQ, cntfrqErrPPM, nil
}

// Whether CNTVCT_EL0 is worth reading is decided by what a read costs, as
// it will be used (workaround included), against the portable source's
// read: where the kernel traps the counter (its erratum workarounds, a
// hypervisor's paravirtual time) a read is an exception taken and
// emulated, hundreds of ns, and the portable source is the better clock.

// readCost is the median cost of one read of a counter and of the
// portable source, measured together (measureReadCost).
type readCost struct {
	CounterNs, PortableNs float64
}

// counterSlower reports whether the counter costs more than the portable
// source, and the default clock should fall back to it.
func (c readCost) counterSlower() bool { return c.CounterNs > c.PortableNs }

// Cost measurement: costBatches batches of costBatchReads reads of each
// source, alternating so that a change of CPU frequency or a busy
// neighbour weighs on both alike, each batch timed by the portable
// source. The median batch wins over preemptions; the batch amortises
// the timer's own read. measureReadCost stops early once costBudget is
// spent (a trapped read with a retrying workaround can cost
// microseconds), after at least costMinBatches of each.
const (
	costBatches    = 31
	costBatchReads = 16
	costMinBatches = 3
	costBudget     = 5 * time.Millisecond
)

// measureReadCost measures what one call of read costs, and one read of
// the portable source (portable, which also times them), in ns: 31 × 16
// reads of each, or fewer where that would take over 5 ms.
func measureReadCost(read, portable func() uint64) readCost {
	var readNs, portableNs []float64
	var sink uint64
	batch := func(read func() uint64) float64 {
		start := portable()
		for i := 0; i < costBatchReads; i++ {
			sink += read()
		}
		return float64(portable()-start) / costBatchReads
	}
	start := portable()
	for i := 0; i < costBatches; i++ {
		readNs = append(readNs, batch(read))
		portableNs = append(portableNs, batch(portable))
		if i+1 >= costMinBatches && time.Duration(portable()-start) > costBudget {
			break
		}
	}
	_ = sink
	return readCost{CounterNs: median(readNs), PortableNs: median(portableNs)}
}

// median returns the middle value of xs (the mean of the middle two for
// an even count); xs is sorted in place.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	if n := len(xs); n%2 == 0 {
		return (xs[n/2-1] + xs[n/2]) / 2
	}
	return xs[len(xs)/2]
}

// cntvctTrust is how the default clock should read CNTVCT_EL0 on this
// machine, and why. Its String is meant for Info.
type cntvctTrust struct {
	Match errata.Match
	// Read is the read to use: readCNTVCT, or the erratum's workaround
	// read on it. It is nil when Fallback is set.
	Read     func() uint64
	Cost     readCost
	Fallback bool
	// Reason says why there is no counter at all (not arm64, purego);
	// empty when there is one.
	Reason string
}

func (t cntvctTrust) String() string {
	if t.Reason != "" {
		return "cntvct: " + t.Reason
	}
	var b strings.Builder
	b.WriteString("cntvct: ")
	if t.Match.Erratum == errata.None {
		b.WriteString("no erratum")
	} else {
		b.WriteString(fmt.Sprintf("%s (%s), kernel's workaround read: %s", t.Match.Erratum, t.Match.Where, t.Match.Erratum.Workaround()))
	}
	b.WriteString("; read " + measure.Ns(t.Cost.CounterNs) + ", portable " + measure.Ns(t.Cost.PortableNs))
	if t.Fallback {
		b.WriteString(": slower than the portable source (the kernel traps the counter?), falling back to it")
	}
	for _, u := range t.Match.Unknown {
		b.WriteString("; could not check " + u)
	}
	return b.String()
}

// untrusted returns nil while the counter may be used, and else an error
// wrapping errUntrusted (or ErrUnsupported where there is no counter)
// that says why.
func (t cntvctTrust) untrusted() error {
	switch {
	case t.Reason != "":
		return fmt.Errorf("%w %q: %s", ErrUnsupported, "cntvct", t.Reason)
	case t.Fallback:
		return fmt.Errorf("%w %q: %s", errUntrusted, "cntvct", strings.TrimPrefix(t.String(), "cntvct: "))
	}
	return nil
}

// decideCNTVCT keeps read unless it costs more than the portable source.
func decideCNTVCT(match errata.Match, read func() uint64, cost readCost) cntvctTrust {
	t := cntvctTrust{Match: match, Read: read, Cost: cost}
	if cost.counterSlower() {
		t.Read, t.Fallback = nil, true
	}
	return t
}
