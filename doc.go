// Package schedclock is a monotonic nanosecond clock for hot paths: a
// port of the Linux kernel's generic sched_clock (kernel/time/sched_clock.c)
// to Go, which reads the CPU's counter directly and never waits for
// anyone.
//
//	start := schedclock.Now()
//	work()
//	elapsed := schedclock.Since(start)
//
// [Now] returns nanoseconds since the package was initialised. On the
// hardware counters it costs little more than the counter read itself
// (one instruction, no system call) and less than [time.Since]; it never
// allocates and never takes a lock.
//
// # What Now promises
//
// Wait-free. The clock's read data lives in a seqcount latch: two banked
// copies, so that one is always complete. A reader retries only when a
// writer made progress, so it finishes in a bounded number of steps even
// if the goroutine updating the clock is stopped half-way, preempted,
// descheduled or stopped in a debugger.
//
// Monotonic in happens-before order. If a call of Now happens before
// another (in the sense of the Go memory model, https://go.dev/ref/mem:
// in one goroutine, or across goroutines synchronised by a channel, a
// mutex or an atomic), the second returns at least as much as the first.
// This holds across every change the clock goes through: the periodic
// fold of the counter into the epoch (Update), a switch to another
// counter ([Clock.Register]), a refinement of the rate, a re-anchoring by
// the watch, Suspend and Resume, wherever the writer is stopped. It
// assumes a counter that is monotonic across CPUs, which the default
// clock checks before trusting one.
//
// Exact. The fold carries the sub-nanosecond remainder and moves time by
// nothing; a rate refinement continues from the exact value reached; the
// conversion from cycles to nanoseconds rounds the rate to within
// 0.002 ppm at any rate from 1 Hz to 10 GHz. Now saturates: no counter
// value makes it wrap, go negative or fall below the epoch.
//
// # What it follows
//
// The default clock follows the hardware counter, its rate calibrated
// against the kernel's CLOCK_MONOTONIC_RAW: an unsteered clock that NTP
// does not slew. Where no hardware counter can be trusted it follows Go's
// monotonic clock (CLOCK_MONOTONIC on Linux, which NTP steers), and
// [Info].Rejected says why. Neither counts time while the machine is
// suspended (the kernel stops CLOCK_MONOTONIC_RAW; the default clock
// re-anchors on it). To stamp events with wall-clock time, use [WallNow]
// or [Clock.Time], which map readings to the wall clock and follow NTP's
// slewing and steps.
//
// # Counters
//
// On amd64 the default clock uses the TSC (LFENCE; RDTSC) when CPUID
// reports an invariant TSC and either the kernel itself uses the TSC as
// its clocksource or the cross-CPU check passed; on arm64 it uses CNTVCT_EL0 (ISB, MRS, then an ordering
// load), with the kernel's read workaround for the counter errata it
// recognises. Elsewhere, in a purego build, or when the counter is not
// trusted, it uses Go's monotonic clock ([Portable]).
//
// # The default clock, at start-up and for life
//
// Importing the package never blocks and does almost nothing: a few
// CPUIDs (or one MRS), a couple of small file reads, and one goroutine,
// parked until the first use. The first Now answers at once; it also
// wakes the background work (calibration, the watch, the cross-CPU
// check, the kernel's verdict), which the wall map and Coarse's ticker
// join only once they are used. Where the kernel itself runs on the TSC
// (its clocksource is "tsc") and a CPU register gives the rate, the
// default clock runs on the counter at once; where the rate must be
// measured, it runs on Go's monotonic clock and switches after a 20 ms
// measurement. Where the kernel does not vouch for the counter, it is
// adopted only after the cross-CPU check (the kernel's check_tsc_warp)
// ran and found no warp; a check that cannot run (GOMAXPROCS=1, one CPU
// allowed, a machine too busy) is retried at 3, 6, 12, 24 and 48 s, and
// without evidence the clock stays on Go's monotonic clock.
// [Info].Kernel, CrossCPU and Pending say what the decision rests on.
//
// For life, the counter's rate is refined against CLOCK_MONOTONIC_RAW
// (within 0.05 ppm after 10 s, following slow drift after that), the
// counter is watched against it every 100 ms (a counter that steps back,
// jumps or changes rate is re-anchored on the reference's timeline,
// never stepping back; [Info].Reanchors counts it), and on Linux the
// kernel's verdict on the TSC is read every 5 s: when the kernel's
// watchdog demotes the TSC, the default clock leaves it too. A caller's
// [Clock.Register] on the default clock ends all of this: the caller has
// taken the clock over.
//
// # Suspend
//
// [Clock.Suspend] freezes a clock at the value it has reached and stops
// reading its counter (which may stop, reset or misbehave while the
// system sleeps); [Clock.Resume] goes on from that value, the suspended
// interval not counted, like the kernel's sched_clock across system
// suspend. While suspended, calibration and the watch stand aside.
//
// # Faults and the shared clock
//
// Every writer path (Register, Update, Suspend, Resume, the background
// refresh and watch) leaves a clock either in its new state or exactly as
// it was, whatever a Source's Read or a reference does: a panic is
// recovered, returned as an error wrapping [ErrFault] (or, in the
// background, counted in [Info].Faults and LastFault), and the clock
// keeps running. The default clock is shared by every package of the
// process: its Close is refused with [ErrDefaultClock]; Suspend, Resume
// and Register on it are for the main package alone (a program that
// knows the machine sleeps, or brings its own counter).
//
// # Choosing a Source
//
// Most programs need only the default clock: [Now], [Since], [Coarse],
// [WallNow]. [New] makes a Clock on any [Source]: a read function, its
// width and its rate. Use it for a counter of your own (a device's
// timer, a virtual clock), with [WithReference] to have its rate refined
// and the counter watched against a clock you trust; use [NewManualClock]
// in tests of code that takes a *Clock. [TSC], [CNTVCT], [Portable] and
// [NewJiffies] give the package's own counters as Sources; [Raw] and
// [Boottime] give CLOCK_MONOTONIC_RAW and CLOCK_BOOTTIME, read through
// the vDSO at a function call's cost (Boottime counts system suspend).
//
// # Tests and testing/synctest
//
// Now, Since, Coarse and WallNow never read a testing/synctest bubble's
// fake time: inside a bubble, time.Sleep(time.Hour) returns at once and
// Now has moved only by the real time that passed; WallNow stays the
// real wall clock; nothing called in a bubble starts a goroutine that
// joins it. A Clock made with [New] inside a bubble has goroutines of its
// own there: Close it before the bubble ends. Code whose behaviour
// depends on time should take a *Clock, and its tests give it one from
// [NewManualClock]: exact and deterministic in all it answers (Now,
// Coarse and Time follow Advance and Set at once; Time maps through a
// fixed wall origin, 2000-01-01 UTC unless SetWallOrigin says otherwise).
// Timers and sleeping are not this package's job: a test that needs them
// uses synctest's fake time, and the code under test reads its durations
// from the *Clock it was given.
//
// # Coarse time
//
// [Coarse] returns a reading of Now at most about one resolution old
// (1 ms, [WithCoarseResolution]) plus the scheduler's lateness, read
// with one atomic load: for rate limiters, caches and timeouts. It never
// runs ahead of Now and never goes backwards, and its ticker runs only
// while it is read.
package schedclock
