// Package schedclock is a monotonic nanosecond clock for hot paths
// (tracing, metrics, rate limiters, latency histograms): it reads the
// CPU's counter directly, never waits for anyone, and never goes
// backwards. It is a port of the Linux kernel's generic sched_clock
// (kernel/time/sched_clock.c) to Go.
//
//	start := schedclock.Now()
//	work()
//	elapsed := schedclock.Since(start) // a time.Duration, never negative
//
// # What to call
//
// Durations: [Now] returns an [Instant], nanoseconds since the package
// was initialised, and [Since] the time.Duration elapsed since one.
// Instants of one clock compare with < and subtract with Sub; a Unix
// time or a plain integer is not one without a conversion.
// Where the default clock runs on a hardware counter (Info().Source
// names it), Now costs about what the counter read itself costs, less
// than time.Since; where it runs on Go's monotonic clock (Source
// "portable": a purego build, a machine whose counter the kernel does not
// run on), it costs about what time.Since costs and buys only what
// follows. The repository's benchmark notes have the figures, with the
// commands that measure them.
//
// Deadlines, caches, rate limits: [Coarse], one call and three loads
// (a few nanoseconds), a reading of Now about half a resolution old (of
// 1 ms) when the machine has a CPU for its ticker, and on Linux never
// older than the kernel's last tick (4 ms at 250 Hz), even where its
// readers hold every P (see Coarse time below).
//
// Timestamps: [WallNow], wall-clock time read from the counter, cheaper
// than time.Now (which reads two clocks, WallNow one). It carries no
// monotonic reading: subtract readings of Now, not WallNows, to measure
// time.
//
// Prefer the time package when what surrounds the clock read costs far
// more than the read (a log line with many fields: the saving is tens of
// nanoseconds, examples/integrations measures it; and a log/slog Logger
// reads time.Now itself, so a Handler that re-stamps with WallNow makes
// it slower); when a time.Time must carry a monotonic reading or feed
// timers; and for sleeping and timers, which this package does not do.
//
// Your own clock: [New] makes a [Clock] on any [Source] (a device's
// timer, a virtual clock), with the same calls as methods, and
// [WithReference] has its rate refined and the counter watched against a
// clock you trust. [Hardware] gives this machine's counter register (the
// TSC, CNTVCT_EL0, ...), [Paravirt] a hypervisor's clock page, [Portable]
// Go's monotonic clock, and [Raw] and [Boottime] CLOCK_MONOTONIC_RAW
// (unsteered by NTP) and CLOCK_BOOTTIME (counts system suspend), read
// through the vDSO at a function call's cost, about time.Since's, where
// unix.ClockGettime makes a system call. [Default] is the clock the
// package-level calls read. Package schedclock/adapt plugs a Clock into
// the clock interfaces of zap and Kubernetes.
//
// The kernel port's writer API, [Clock.Register], [Clock.Update],
// [Clock.Suspend], [Clock.Resume] and [Clock.Close], switches, folds,
// freezes and stops a clock; a service needs none of it.
//
// # Tests and testing/synctest
//
// Code whose behaviour depends on time should take a *Clock, and its
// tests give it one from package schedclocktest: NewManualClock, on a
// counter that moves only when told (Advance, Set), exact and
// deterministic in all it answers (Now, Since and Coarse follow Advance
// and Set at once; WallTime maps through a fixed wall origin), closed when
// the test ends; or NewBubbleClock, for a test in a testing/synctest
// bubble.
//
// Now, Since, Coarse and WallNow never read a testing/synctest bubble's
// fake time: inside a bubble time.Sleep(time.Hour) returns at once and
// Now has moved only by the real time that passed, WallNow stays on the
// real wall clock, and nothing called in a bubble starts a goroutine
// that joins it. Code that should follow the bubble's time reads a Clock
// made inside the bubble on [Bubble], the Source that reads the time
// package's clock (the bubble's fake time there; the real time outside a
// bubble; its rate declared, never refined), and the test closes it there
// (schedclocktest.NewBubbleClock does both). Such a clock's WallTime is
// the bubble's wall time: WallTime(c.Now()) is the bubble's time.Now, and
// a reading's WallTime never changes. A Clock that New makes inside a
// bubble on a Source of the caller's that reads the bubble's clock maps
// onto the bubble's wall clock the same way, and checks a WithReference
// reference against the bubble's clock. Timers and sleeping are the
// bubble's job, not this package's.
//
// # Coarse time
//
// [Coarse] returns a reading of Now taken by the first Coarse after each
// tick of a ticker (1 ms, [WithCoarseResolution]) that starts at the
// first Coarse and, on Linux, after each of the kernel's own timekeeping
// updates (one per tick of the kernel, 1/CONFIG_HZ: 4 ms at 250 Hz),
// which Coarse sees in the vDSO's time data at the cost of two more loads
// from a cache line the kernel writes once per tick. So it is at most one
// resolution old plus how late the ticker runs, and never older than the
// kernel's CLOCK_MONOTONIC_COARSE. The kernel's ticks matter where the
// ticker cannot run: a goroutine that holds every P (GOMAXPROCS=1, a
// spinner) lets the ticker run only when the Go scheduler preempts it,
// 10 to 40 ms apart. Resolutions of 10 ms or more keep to their ticker.
// How old a spinner's Coarse gets, measured with the command that
// measures it, is in the repository's benchmark notes; the tests hold
// Coarse to the kernel's coarse clock at GOMAXPROCS=1 under any load.
// Where there is no time data to read (other systems, a time namespace,
// qemu-user), the ticker alone refreshes Coarse: at GOMAXPROCS=1 then the
// scheduler's preemption bound, 10 to 40 ms. Coarse is a call, not
// inlined, so that the spinner can be preempted there. A deadline read
// with Coarse fires that much late, never early: Coarse never runs ahead
// of Now, and never goes backwards. The ticker runs only while Coarse is
// read: after 3 ticks without a read it stops, and the next Coarse reads
// Now itself. On a clock on a schedclocktest.Manual counter or a
// [Bubble] Source Coarse is Now, exact.
//
// # The default clock, at start-up and for life
//
// Importing the package never blocks and costs almost nothing: a few
// CPUIDs (or one MRS), a small file read, and one goroutine, parked until
// the first use (a goroutine started later from inside a synctest bubble
// would join it). The first Now answers at once and wakes the background
// work (calibration, the watch, the cross-CPU check, the kernel's
// verdict); Coarse's ticker runs only while Coarse is called, and the
// wall map is aimed every 100 ms only while WallNow is called (otherwise
// every 1-3 s, on the wake-ups the watch makes anyway).
//
// On amd64 the default clock uses the TSC (LFENCE; RDTSC) when CPUID
// reports an invariant TSC and there is evidence that it is synchronised
// across CPUs: either the kernel runs on it (its clocksource is "tsc",
// which it keeps only after its own boot-time synchronisation check and
// under its clocksource watchdog), or, where the kernel's word cannot be
// read, this package's cross-CPU check (the kernel's check_tsc_warp) ran
// and found no warp. Where the kernel vouches, the clock runs on the TSC
// at once (after a 20 ms measurement when no CPU register gives the
// rate), and the cross-CPU check runs in the background as a second
// opinion: a warp sends the clock back to Go's monotonic clock; a check
// that cannot run (GOMAXPROCS=1, one allowed CPU, a machine too busy) is
// retried after 1, 2, 4, 8 and 16 minutes, so until it runs the kernel's
// word is the only evidence. Without the kernel's word, the clock stays
// on Go's monotonic clock until the check passes (retried after 3, 6, 12,
// 24 and 48 s). On an amd64 VM guest whose kernel runs on the
// hypervisor's paravirtual clock (kvm-clock, Xen, Hyper-V's TSC page) it
// uses that clock's page, as the vDSO does ([Paravirt]), while the page
// shows the hypervisor's stable-TSC promise and the kernel runs on it;
// both are read again for life, and when either goes the clock falls
// back to Go's monotonic clock. A TSC value below the page's stamp is no
// motion, as in the vDSO; a page that is not time for a while (an update
// that does not settle within some 25 µs, a scale no hypervisor writes,
// a new version whose time disagrees with CLOCK_MONOTONIC_RAW) is read
// through CLOCK_MONOTONIC_RAW on the page's timeline meanwhile, which
// Info's Source and Evidence.CounterCheck say, with the time; the clock
// returns to the page once it is consistent again, never stepping back. On arm64 it uses CNTVCT_EL0 (ISB, MRS,
// then an ordering load), with the kernel's read workaround for the
// counter errata it recognises; on riscv64, ppc64le, s390x and loong64
// the architecture's time base, on the kernel's word. Elsewhere, in a
// purego build, or when the counter is not trusted, it uses Go's
// monotonic clock ([Portable]). Info's [Evidence] says what each
// decision rests on (Kernel, CrossCPU, CounterCheck, Pending, Rejected).
//
// For life, the counter's rate is refined against CLOCK_MONOTONIC_RAW
// (within 0.05 ppm from 10 s on, following slow drift after that), and
// the counter is watched against it: every 100 ms for the first half
// second, then at periods doubling to 2 s (a counter that steps back,
// jumps or changes rate is re-anchored on the reference's timeline,
// never stepping back; [Watch].Reanchors counts it; a reading far ahead of
// what the reference counted is not followed: the clock stands still at
// the most a reader may have read until the reference's timeline reaches
// it, at most as long as the refused lead, and [Watch].CounterFaults
// counts it). On Linux the kernel's
// verdict on the TSC is read every 5 to 7 s: when the kernel's watchdog
// demotes the TSC, the default clock leaves it too. Refinements, folds
// and the verdict ride on the watch's ticks, so from 3.5 s after the
// first use an idle process pays one wake-up every 2 s for all of it. A
// caller's [Clock.Register] on the default clock ends all of this: the
// caller has taken the clock over.
//
// # What Now promises
//
// Wait-free. The clock's read data lives in a seqcount latch: two banked
// copies, so that one is always complete. A reader retries only when a
// writer made progress, so it finishes in a bounded number of steps even
// if the goroutine updating the clock is stopped half-way, preempted,
// descheduled or stopped in a debugger. It never allocates and never
// takes a lock.
//
// Monotonic in happens-before order. If a call of Now happens before
// another (in the sense of the Go memory model, https://go.dev/ref/mem:
// in one goroutine, or across goroutines synchronised by a channel, a
// mutex or an atomic), the second returns at least as much as the first.
// This holds across every change the clock goes through: the periodic
// fold of the counter into the epoch (Update), a switch to another
// counter ([Clock.Register]), a refinement of the rate, a re-anchoring by
// the watch (one that refuses a reading far ahead stands the clock still
// rather than step back: see [Watch]), Suspend and Resume, wherever the
// writer is stopped. It
// assumes a counter that is monotonic across CPUs, which the default
// clock checks before trusting one; a counter that steps back makes
// readers fall back to the last fold, at most one watch period old,
// until the watch re-anchors it. A counter narrower than 64 bits also
// needs its fold at least every 3/4 of a wrap: a process that no
// goroutine of it can run in for longer (see [Source]) may read a step
// back until the next fold, which adds back any wrap lost
// ([Info].LostWraps).
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
// against the kernel's CLOCK_MONOTONIC_RAW, which NTP does not slew.
// Where no hardware counter can be trusted it follows Go's monotonic
// clock (CLOCK_MONOTONIC on Linux, which NTP steers). Neither counts time
// while the machine is suspended (use [Boottime] for a clock that does).
// [WallNow] and [Clock.WallTime] map readings to the wall clock and follow
// NTP's slewing and steps.
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
// keeps running; the Read of a Source being registered that panics is
// refused with [ErrInvalidSource]. A reference that blocks delays the
// background work but never Now, Coarse or Info (a snapshot); one that
// is stuck, steps back or jumps is named in [Watch].Reference and not
// followed until it agrees with the runtime's monotonic clock again.
// The default clock is shared by every package of the process: its Close
// is refused with an error; Suspend, Resume and Register on it
// are for the main package alone (a program that knows the machine
// sleeps, or brings its own counter).
package schedclock
