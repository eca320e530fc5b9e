package schedclock

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	_ "unsafe" // for go:linkname
)

// Source describes a free-running counter that a Clock turns into
// nanoseconds.
//
// Read must be safe to call from many goroutines at once, must not block
// and should be as cheap as possible: it is on the read path of every Now.
// Only the low Bits bits of its value count; the counter is expected to
// count up at Rate Hz and to wrap from 2^Bits-1 to 0. A counter that
// wraps must take at least 667 ms to do so (16 bits at up to 98 kHz, 32
// bits at up to 6.4 GHz): the Clock's goroutine folds it eight times per
// wrap and may run up to 500 ms late on a loaded machine. A Read that
// panics is refused by New and Register; in the Clock's goroutine, the
// fold is tried again later. Read is called with the Clock's writer lock
// held (by Register, Update, Suspend, Resume and the Clock's goroutine):
// a Read that calls one of those methods, or Close, on the same Clock
// gets an error instead of waiting for itself.
//
// What a narrow counter cannot survive exactly is a stretch in which the
// Clock's goroutine cannot run at all (a non-preemptible assembly loop on
// every P, a process stopped or descheduled by the OS). Readers
// are exact while the last fold is less than 7/8 of a wrap old: a stretch
// longer than 3/4 of the wrap period (7/8 of it less the refresh period,
// Info().RefreshPeriod) can make a Now read during it, or after it and
// before the next fold, step back by up to the time since the last fold.
// A stretch longer than the wrap period less the refresh period hides
// whole wraps from the masked delta. The next fold puts both right: it
// measures on the runtime's monotonic clock how long ago the last fold
// was, takes a delta that readers clamped for the progress it is, adds
// back the whole wraps the time says were lost, exactly, and counts them
// in Info().LostWraps. A counter that did not follow its Rate meanwhile
// to within 1/8 of a wrap (stopped, stepped back, driven by hand) is not
// second-guessed. A 64-bit counter at up to 10 GHz takes over 58 years to
// wrap and is exempt.
type Source struct {
	Name string
	Read func() uint64
	Bits int
	Rate uint64 // Hz

	// manual is the manual counter behind a Source from its Source method.
	manual *manual
	// bubble is where a Source from Bubble started.
	bubble *bubbleOrigin
}

// The errors a caller can act on. Every error this package returns
// wraps one of these or says why in words alone; test them with
// errors.Is.
var (
	// ErrInvalidSource: a Source given to New or Register is unusable (nil
	// Read, a Read that panics, Bits outside 1..64, Rate 0, or a counter
	// that wraps too fast to be tracked).
	ErrInvalidSource = errors.New("schedclock: invalid source")
	// ErrSlowerSource: Register was given a Source whose Rate is lower
	// than the current one (the kernel's "rate wins" rule).
	ErrSlowerSource = errors.New("schedclock: source is slower than the current one")
	// ErrClosed: the Clock was closed.
	ErrClosed = errors.New("schedclock: clock is closed")
	// ErrUnsupported: the counter asked for (Hardware, Paravirt, Raw,
	// Boottime) does not exist on this platform or in this build, or
	// cannot be trusted as a clock on this machine; the message says why.
	// Portable works everywhere.
	ErrUnsupported = errors.New("schedclock: counter not supported here")
	// ErrFault: user code the clock called (a Source's Read) panicked
	// during the call that returns it; the clock was left exactly as it
	// was before the call, and Info counts the fault. The call may be
	// tried again.
	ErrFault = errors.New("schedclock: source faulted")
)

// The errors that report a caller's mistake, which no program handles at
// run time: each says what went wrong, and tests match them
// (export_test.go).
var (
	// errUntrusted: the hardware counter exists but cannot be trusted as
	// a clock on this machine. It is an ErrUnsupported to errors.Is.
	errUntrusted error = &subError{"schedclock: counter not trusted", ErrUnsupported}
	// errInvalidOption: an Option given to New is unusable (a nil
	// reference clock, a duplicate Option, ...).
	errInvalidOption = errors.New("schedclock: invalid option")
	// errDefaultClock: the call would stop the process-wide default
	// clock, which every package of the process shares (Close).
	errDefaultClock = errors.New("schedclock: the default clock cannot be closed")
	// errReentered: a writer method (Register, Update, Suspend, Resume,
	// Close) was called by user code that the same Clock's writer was
	// running (a Source's Read, a reference): the writer holds the
	// Clock's lock, so the call would wait for itself forever. It
	// changes nothing, and the writer that ran the user code goes on.
	errReentered = errors.New("schedclock: writer method called from inside the clock's own writer")
)

// subError is a sentinel error of its own that errors.Is also matches
// with a broader one (kind).
type subError struct {
	msg  string
	kind error
}

func (e *subError) Error() string { return e.msg }
func (e *subError) Unwrap() error { return e.kind }

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
)

// rateOriginNames are the RateOrigins' names, as Info prints them.
var rateOriginNames = [...]string{rateDeclared: "declared", rateCPUID: "cpuid", rateHypervisor: "hypervisor leaf",
	rateMeasured: "measured", rateCNTFRQ: "cntfrq", rateRefined: "refined",
	rateDeviceTree: "device tree", rateCPUInfo: "cpuinfo", rateArchitected: "architected", rateCPUCFG: "cpucfg",
	rateNanoseconds: "nanoseconds by construction"}

func (o rateOrigin) String() string {
	if o >= 0 && int(o) < len(rateOriginNames) {
		return rateOriginNames[o]
	}
	return fmt.Sprintf("rateOrigin(%d)", int(o))
}

func (s Source) validate() error {
	switch {
	case s.Read == nil:
		return fmt.Errorf("%w %q: Read is nil", ErrInvalidSource, s.Name)
	case s.Bits < 1 || s.Bits > 64:
		return fmt.Errorf("%w %q: Bits = %d, want 1..64", ErrInvalidSource, s.Name, s.Bits)
	case s.Rate == 0:
		return fmt.Errorf("%w %q: Rate is 0 Hz", ErrInvalidSource, s.Name)
	}
	return nil
}

// runtimeNano is the runtime's monotonic clock, the one time.Now and
// time.Since read (CLOCK_MONOTONIC through the vDSO on Linux), but read
// directly: inside a testing/synctest bubble time.Since returns the
// bubble's fake time, while the runtime's own clock goes on with the
// machine's. The runtime keeps this linkname working for the packages
// that use it ("Many external packages also linkname nanotime",
// runtime/time_nofake.go).
//
//go:linkname runtimeNano runtime.nanotime
func runtimeNano() int64

// readMono reads Go's monotonic clock, ordered before the caller's later
// loads (see orderAfter). Clock.Now recognises it (portableReadPtr) and reads
// runtimeNano inline.
func readMono() uint64 {
	v := uint64(runtimeNano())
	orderAfter(v)
	return v
}

// portableReadPtr identifies readMono in a bank's read field.
var portableReadPtr = funcPtr(readMono)

// Portable returns a Source built on Go's monotonic clock (the runtime's
// nanotime, CLOCK_MONOTONIC on Linux): 1 GHz, 63 bits, available on every
// platform, ready at once. It follows the kernel's NTP frequency
// corrections, so it is steered rather than raw.
func Portable() Source {
	return Source{Name: "portable", Read: readMono, Bits: 63, Rate: 1_000_000_000}
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

// orderSink is what orderAfter loads: it is never written, so every core
// keeps it in its cache.
var orderSink [2]atomic.Uint64

// orderAfter returns once v is known, through a load whose address depends
// on v, so that the caller's later loads (a latch's seq re-check) cannot be
// satisfied before the counter read that produced v: a load cannot be
// issued before its address is known, x86 keeps later loads after it
// (Intel SDM Vol. 3A 9.2.2, "Reads are not reordered with other reads"),
// and on arm64 it is an acquire (LDAR), which orders every later load
// after it. v>>63 is 0 for every value it is given (nanoseconds since
// the machine started), but neither the compiler nor the CPU can know
// that before v. The hardware counters' readers do the same in assembly;
// the portable source, which reads the clock through the Go runtime, uses
// this, in every build (purego included).
func orderAfter(v uint64) {
	orderSink[v>>63].Load()
}
