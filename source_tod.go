package schedclock

import (
	"fmt"

	"github.com/schedclock/schedclock/internal/kernel"
)

// todClocksource is the name under which the kernel registers the TOD
// clock (clocksource_tod, arch/s390/kernel/time.c).
const todClocksource = "tod"

// todCounter is the TOD clock's entry in the default clock's table:
// trusted on the kernel's word (its clocksource is tod), which it
// follows for life, and only where a read costs no more than the
// portable source's.
var todCounter = counter{arch: "s390x", probe: probeTOD, verdict: todVerdict, prepare: prepareReadCost}

// todVerdict is the kernel's verdict on the counter (see clocksourceVerdict).
func todVerdict() kernel.Verdict { return clocksourceVerdict(todClocksource) }

// todRate is the TOD clock's rate, fixed by the architecture: bit 51 of
// the 64-bit clock is one microsecond, so the clock counts 2^12 = 4096
// units per µs, 4.096 GHz, whatever the machine. Only the resolution of
// the bits below bit 51 that a model actually steps varies.
const todRate = 4_096_000_000

// TOD returns the s390x time-of-day clock as a Source: 64 bits, read
// with STCKF between two serialisations (source_tod_s390x.s says why),
// at its architected 4.096 GHz. It never blocks and reads no file.
//
// The TOD clock is one clock for the whole configuration: the
// architecture keeps the TOD clocks of all CPUs synchronised (the
// TOD-clock-sync control, and STP across machines), so that a value
// stored on one CPU is never behind one stored earlier on another; that
// is what lets the kernel use it for sched_clock on every CPU without the
// TSC's cross-CPU checks.
//
// Off s390x, in a purego or non-gc build, err wraps ErrUnsupported and
// says why.
func todSource() (Source, error) {
	src, _, _, err := probeTOD()
	return src, err
}

// probeTOD is TOD with the origin and error of its rate: the
// architecture's, exact (what steering the machine applies to its
// clock, the watch against CLOCK_MONOTONIC_RAW follows).
func probeTOD() (src Source, origin rateOrigin, errPPM float64, err error) {
	if !todSupported {
		return Source{}, 0, 0, fmt.Errorf("%w %q: %s", ErrUnsupported, "tod", noAsmReason("s390x"))
	}
	return Source{Name: "tod", Read: todReader(), Bits: timerBits, Rate: todRate}, rateArchitected, 0, nil
}
