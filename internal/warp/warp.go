// Package warp answers whether a counter goes backwards from one CPU to
// another: the kernel's check_tsc_warp (arch/x86/kernel/tsc_sync.c) in
// user space, with threads pinned to the CPUs of the process's affinity
// mask (internal/osthread). Check runs it on any read function and says
// what it found, or why it could not run.
package warp

import (
	"fmt"
	"time"

	"github.com/schedclock/schedclock/internal/measure"
)

// The cross-CPU warp check is the kernel's check_tsc_warp
// (arch/x86/kernel/tsc_sync.c) in user space: two threads pinned to two
// CPUs read the counter in turn, each comparing its read with the last
// value the other published, and a value read after another must never be
// lower. The kernel runs it as each CPU comes up, against one already
// up, and turns the TSC off when one warp is seen; a user-space clock
// needs it too, because the kernel may not have run it (tsc=reliable, a
// hypervisor that says the TSC is stable) and because per-CPU offsets
// have been seen on real machines long after boot (firmware writing
// IA32_TSC_ADJUST).
//
// Where the kernel guards last_tsc with a spinlock, each thread here owns
// one cache line and publishes its reads there; the other loads it before
// its own read. The counter read is ordered after that load (LFENCE,
// ISB, or the runtime's own clock read), and the published value was read
// before it was stored, so a read that returns less than the value just
// loaded is a warp, exactly as prev > now is in the kernel. Without the
// lock, a thread preempted half-way stalls nobody.
//
// Pairs: every CPU of the affinity mask is checked against exactly one
// reference CPU that is already checked, in rounds that double the
// checked set: round 0 pairs the first two CPUs, round 1 pairs each of
// them with one new CPU, and so on. The pairs of a round share no CPU and
// run in parallel, so n CPUs take n-1 pairs (O(n) work) in ceil(log2 n)
// rounds. The price of not pairing every CPU with one boot CPU: two CPUs
// are known to agree only through the chain that links them, to within
// (number of links) × the smallest warp a pair can see, a few hundred ns
// per link (one cache-line transfer and one counter read). Offsets worth
// worrying about (the microseconds to seconds seen on real machines) show
// on whichever link carries them.

// Verdict is the outcome of a cross-CPU warp check.
type Verdict int

const (
	Unchecked Verdict = iota // the check could not run; Reason says why
	None                     // every pair agreed
	Found                    // some read went backwards across CPUs
)

// Report is what Check found. Its String is meant for the clock's Info.
type Report struct {
	Verdict Verdict
	Reason  string // why the check could not run (Unchecked)
	// Busy: the check could not run only because other work kept the
	// pinned threads from running at the same time; worth another try
	// later, where the other reasons are not.
	Busy bool
	// Never: the check cannot run on this system at all (it needs
	// thread affinity, which only Linux offers here); no retry helps.
	Never bool

	CPUs   int    // CPUs in the affinity mask that were checked
	Pairs  int    // CPU pairs checked
	Reads  uint64 // counter reads compared with a fresh value from the other CPU
	Warps  uint64 // comparisons that went backwards
	Before int    // the largest warp: a value read on CPU After was
	After  int    // Cycles lower than one read before it on CPU Before
	Cycles uint64
	Ns     float64 // Cycles at the rate given to Check (0 if none given)
	Took   time.Duration
}

// OK reports whether the check ran and found no warp.
func (r Report) OK() bool { return r.Verdict == None }

func (r Report) String() string {
	switch r.Verdict {
	case None:
		return fmt.Sprintf("no warp across %d CPUs (%s, %d cross-CPU reads, %v)",
			r.CPUs, plural(r.Pairs, "pair"), r.Reads, r.Took.Round(time.Microsecond))
	case Found:
		where := fmt.Sprintf("a read on CPU %d was %d cycles", r.After, r.Cycles)
		if r.Ns > 0 {
			where += fmt.Sprintf(" (%s)", measure.Ns(r.Ns))
		}
		if r.Before == r.After {
			where += " behind an earlier read on the same CPU"
		} else {
			where += fmt.Sprintf(" behind an earlier read on CPU %d", r.Before)
		}
		return fmt.Sprintf("cross-CPU warp: %s; %d of %d cross-CPU reads went backwards (%d CPUs, %s, %v)",
			where, r.Warps, r.Reads, r.CPUs, plural(r.Pairs, "pair"), r.Took.Round(time.Microsecond))
	}
	return "cross-CPU check not run: " + r.Reason
}

// plural writes n and noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// DefaultBudget is the default budget for the whole check: on two CPUs
// it is the length of the one pair's run, which the kernel sets to 2 ms
// between cores of one package and 20 ms otherwise; 10 ms plus thread
// set-up stays under the 20 ms the default clock allows itself.
const DefaultBudget = 10 * time.Millisecond
