package schedclock

import (
	"fmt"
	"math"
	"runtime"
	"time"

	"github.com/schedclock/schedclock/internal/kernel"
)

// A counter register is, to the default clock, a descriptor: what it is
// called, how to find it without blocking, where its rate comes from,
// whose word it is trusted on and which checks it must pass. Each
// counter's file (source_tsc.go, source_cntvct.go, source_timer.go)
// declares its entry, and counter.go's table lists them in order of
// preference, as x/sys/cpu lists its features in one table: the default
// clock walks the table and never asks a counter's name.

// rateOrigin says where a Source's Rate came from.
type rateOrigin int

const (
	rateDeclared   rateOrigin = iota // given by the caller in Source.Rate
	rateCPUID                        // x86 CPUID leaf 0x15 (and 0x16)
	rateHypervisor                   // hypervisor timing leaf 0x40000010
	rateMeasured                     // measured against CLOCK_MONOTONIC_RAW
	rateCNTFRQ                       // arm64 CNTFRQ_EL0
	rateRefined                      // refined in the background against the Clock's reference
)

// The rate origins of the riscv64, ppc64le, s390x and loong64 counters,
// numbered on from rateRefined.
const (
	rateDeviceTree  rateOrigin = rateRefined + 1 + iota // riscv64 device tree /cpus/timebase-frequency
	rateCPUInfo                                         // ppc64le /proc/cpuinfo timebase line
	rateArchitected                                     // fixed by the architecture (s390x TOD: bit 51 is 1 µs)
	rateCPUCFG                                          // loong64 CPUCFG leaves 4 and 5
	// rateNanoseconds: the counter counts nanoseconds by construction (a
	// paravirtual clock's page converts the TSC with the hypervisor's
	// own scale): exact, never refined, still watched.
	rateNanoseconds
	// rateKernel: the kernel's own conversion of the counter, its raw
	// clock's mult and shift from the vDSO's time data, where the
	// kernel runs on the counter (descriptor.VDSOMode): CLOCK_MONOTONIC_RAW
	// is that conversion, so the clock agrees with it to the ns by
	// construction; never refined, still watched.
	rateKernel
)

// rateOriginNames are the RateOrigins' names, as Info prints them.
var rateOriginNames = [...]string{rateDeclared: "declared", rateCPUID: "cpuid", rateHypervisor: "hypervisor leaf",
	rateMeasured: "measured", rateCNTFRQ: "cntfrq", rateRefined: "refined",
	rateDeviceTree: "device tree", rateCPUInfo: "cpuinfo", rateArchitected: "architected", rateCPUCFG: "cpucfg",
	rateNanoseconds: "nanoseconds by construction", rateKernel: "kernel"}

func (o rateOrigin) String() string {
	if o >= 0 && int(o) < len(rateOriginNames) {
		return rateOriginNames[o]
	}
	return fmt.Sprintf("rateOrigin(%d)", int(o))
}

// untrusted is errUntrusted's type: a counter that cannot be trusted is
// one that is not supported here, to errors.Is.
type untrusted struct{}

func (untrusted) Error() string { return "schedclock: counter not trusted" }
func (untrusted) Unwrap() error { return ErrUnsupported }

// A descriptor is one counter's entry in the default clock's table.
type descriptor struct {
	// Arch is the GOARCH the counter exists on; the walk skips the others.
	Arch string
	// Probe returns the counter as a Source without blocking (it runs
	// in the default clock's set-up, before its choice): Rate 0 with
	// rateMeasured when the rate must be measured, which the default
	// clock does in the background against CLOCK_MONOTONIC_RAW; or an
	// error wrapping ErrUnsupported or errUntrusted that says why the
	// counter cannot be used.
	Probe func() (src Source, origin rateOrigin, errPPM float64, err error)
	// Verdict reads the kernel's word on the counter (is its clocksource
	// this counter?), at start and every verdictPeriod for life: the
	// kernel's clocksource watchdog can demote a counter hours after
	// boot. nil where the kernel keeps no watchdog on the counter;
	// NoVerdict then says why, for Info.Evidence.Kernel. A counter the
	// kernel runs on is adopted at once, the cross-CPU check a second
	// opinion; one whose verdict cannot be read (no sysfs) only once the
	// cross-CPU check ran and found no warp.
	Verdict   func() kernel.Verdict
	NoVerdict string
	// VDSOMode is the vDSO clock mode in which the kernel converts this
	// counter (vdsoModeTSC), 0 where it converts none the default clock
	// could read. Where the kernel runs on the counter, in that mode,
	// the default clock converts with the kernel's own raw conversion
	// (rateKernel) rather than a rate of its own.
	VDSOMode int32
	// Evidence, if not nil, is the counter's own evidence, asked with
	// the kernel's verdict for life: "" while it holds, else why not (a
	// paravirtual page whose stable bit cleared).
	Evidence func() string
	// Prepare, if not nil, runs in the set-up once the counter is chosen
	// (cheaply: the choice waits for it) and returns the Source to use
	// (a read function with a workaround) and the counter's own check,
	// run in the background with the clock's measures before the
	// counter's rate is adopted: what it found, for
	// Info.Evidence.CounterCheck, and an error if the counter must not be
	// used.
	Prepare func(Source) (Source, func(measures) (found string, err error))
	// Describe, if not nil, says what the counter's own evidence shows
	// (the paravirtual page: where, its version and flags), for
	// Info.Evidence.CounterCheck: read at start and with every verdict.
	Describe func() string
	// Status, if not nil, says what the counter's Source reads when
	// that is not the counter (a paravirtual clock's Source on its
	// fallback; "" while it is the counter), and the history of such
	// times, each with its time ("" while there was none). Info appends
	// the first to Source and the second to CounterCheck, fresh at every
	// call.
	Status func() (reading, history string)
}

// measures are what a counter's own check measures with: the clock's.
type measures struct {
	// Portable is the portable source's read, whose cost a counter's
	// read must not exceed.
	Portable func() uint64
	// Rate measures read's rate against CLOCK_MONOTONIC_RAW over d.
	Rate func(read func() uint64, d time.Duration) (hz, errPPM float64, err error)
}

// A firmware figure is checked before it is used: a measurement of
// rateCheckTime must agree with it to within rateCheckPPM, far more than
// an oscillator's error and the measurement's together, so only a
// counter that does not run at the stated rate at all fails it.
// qemu-loongarch64 7.2 is one: its CPUCFG says 100 MHz, its RDTIME.D
// reads the host's TSC.
const (
	rateCheckTime = 20 * time.Millisecond
	rateCheckPPM  = 1000
)

// statedRateHolds reports whether src counts at its Rate, to within
// rateCheckPPM over rateCheckTime, measured by measure. A measurement
// that fails says nothing either way, and leaves the stated rate.
func statedRateHolds(src Source, measure func(read func() uint64, d time.Duration) (hz, errPPM float64, err error)) bool {
	hz, errPPM, err := measure(src.Read, rateCheckTime)
	if err != nil {
		return true
	}
	offPPM := math.Abs(hz-float64(src.Rate)) / float64(src.Rate) * 1e6
	return offPPM <= rateCheckPPM+errPPM
}

// noAsmReason says which half of the assembly's build tag (gc && !purego,
// on arch) excluded it from this build.
func noAsmReason(arch string) string {
	switch {
	case runtime.GOARCH != arch:
		return "not " + arch + " (GOARCH=" + runtime.GOARCH + ")"
	case runtime.Compiler != "gc":
		return "built with " + runtime.Compiler + ", not gc"
	}
	return "built with the purego tag"
}
