package hwcounter

import (
	"errors"
	"math"
	"runtime"
	"time"

	"github.com/schedclock/schedclock/internal/format"
	"github.com/schedclock/schedclock/internal/kernel"
)

// A counter register is, to the default clock, a descriptor: what it is
// called, how to find it without blocking, where its rate comes from,
// whose word it is trusted on and which checks it must pass. Each
// counter's file (tsc.go, cntvct.go, timer.go) declares its entry, and
// the root's table lists them in order of preference, as x/sys/cpu lists
// its features in one table: the default clock walks the table and
// never asks a counter's name.

// Source is a counter as a descriptor finds it: the fields of
// schedclock.Source.
type Source struct {
	Name string
	Read func() uint64
	Bits int
	Rate uint64 // Hz
}

// RateOrigin says where a Source's Rate came from.
type RateOrigin int

const (
	RateDeclared   RateOrigin = iota // given by the caller in Source.Rate
	RateCPUID                        // x86 CPUID leaf 0x15 (and 0x16)
	RateHypervisor                   // hypervisor timing leaf 0x40000010
	RateMeasured                     // measured against CLOCK_MONOTONIC_RAW
	RateCNTFRQ                       // arm64 CNTFRQ_EL0
	RateRefined                      // refined in the background against the Clock's reference
)

// The rate origins of the riscv64, ppc64le, s390x and loong64 counters,
// numbered on from RateRefined.
const (
	RateDeviceTree  RateOrigin = RateRefined + 1 + iota // riscv64 device tree /cpus/timebase-frequency
	RateCPUInfo                                         // ppc64le /proc/cpuinfo timebase line
	RateArchitected                                     // fixed by the architecture (s390x TOD: bit 51 is 1 µs)
	RateCPUCFG                                          // loong64 CPUCFG leaves 4 and 5
	// RateNanoseconds: the counter counts nanoseconds by construction (a
	// paravirtual clock's page converts the TSC with the hypervisor's
	// own scale): exact, never refined, still watched.
	RateNanoseconds
	// RateKernel: the kernel's own conversion of the counter, its raw
	// clock's mult and shift from the vDSO's time data, where the
	// kernel runs on the counter (Counter.VDSOMode): CLOCK_MONOTONIC_RAW
	// is that conversion, so the clock agrees with it to the ns by
	// construction; never refined, still watched.
	RateKernel
)

// rateOriginNames are the RateOrigins' names, as Info prints them.
var rateOriginNames = [...]string{RateDeclared: "declared", RateCPUID: "cpuid", RateHypervisor: "hypervisor leaf",
	RateMeasured: "measured", RateCNTFRQ: "cntfrq", RateRefined: "refined",
	RateDeviceTree: "device tree", RateCPUInfo: "cpuinfo", RateArchitected: "architected", RateCPUCFG: "cpucfg",
	RateNanoseconds: "nanoseconds by construction", RateKernel: "kernel"}

func (o RateOrigin) String() string {
	if o >= 0 && int(o) < len(rateOriginNames) {
		return rateOriginNames[o]
	}
	return format.Sprintf("rateOrigin(%d)", int(o))
}

// The errors a descriptor's refusal wraps: schedclock.ErrUnsupported,
// and its errUntrusted, which errors.Is also matches as ErrUnsupported.
var (
	// ErrUnsupported: the counter does not exist on this platform or in
	// this build, or cannot be trusted as a clock on this machine. It is
	// schedclock.ErrUnsupported itself, which the schedclock package
	// declares (its go doc then names no internal package) and stores
	// here as it initialises, before anything can probe a counter: this
	// value stands in for tests of this package alone.
	ErrUnsupported = errors.New("schedclock: counter not supported here")
	// ErrUntrusted: the counter exists but cannot be trusted as a clock
	// on this machine.
	ErrUntrusted error = untrusted{}
)

type untrusted struct{}

func (untrusted) Error() string { return "schedclock: counter not trusted" }
func (untrusted) Unwrap() error { return ErrUnsupported }

// A Counter is one counter's entry in the default clock's table.
type Counter struct {
	// Arch is the GOARCH the counter exists on; the walk skips the others.
	Arch string
	// Probe returns the counter as a Source without blocking (it runs
	// in the default clock's set-up, before its choice): Rate 0 with
	// RateMeasured when the rate must be measured, which the default
	// clock does in the background against CLOCK_MONOTONIC_RAW; or an
	// error wrapping ErrUnsupported or ErrUntrusted that says why the
	// counter cannot be used.
	Probe func() (src Source, origin RateOrigin, errPPM float64, err error)
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
	// counter (VDSOModeTSC), 0 where it converts none the default clock
	// could read. Where the kernel runs on the counter, in that mode,
	// the default clock converts with the kernel's own raw conversion
	// (RateKernel) rather than a rate of its own.
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
	Prepare func(Source) (Source, func(Measures) (found string, err error))
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

// Measures are what a counter's own check measures with: the clock's.
type Measures struct {
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

// StatedRateHolds reports whether src counts at its Rate, to within
// rateCheckPPM over rateCheckTime, measured by measure. A measurement
// that fails says nothing either way, and leaves the stated rate.
func StatedRateHolds(src Source, measure func(read func() uint64, d time.Duration) (hz, errPPM float64, err error)) bool {
	hz, errPPM, err := measure(src.Read, rateCheckTime)
	if err != nil {
		return true
	}
	offPPM := math.Abs(hz-float64(src.Rate)) / float64(src.Rate) * 1e6
	return offPPM <= rateCheckPPM+errPPM
}

// NoAsmReason says which half of the assembly's build tag (gc && !purego,
// on arch) excluded it from this build.
func NoAsmReason(arch string) string {
	switch {
	case runtime.GOARCH != arch:
		return "not " + arch + " (GOARCH=" + runtime.GOARCH + ")"
	case runtime.Compiler != "gc":
		return "built with " + runtime.Compiler + ", not gc"
	}
	return "built with the purego tag"
}
