// Package schedclock is an NMI-safe monotonic nanosecond clock for hot
// paths: a port of the Linux kernel's generic sched_clock
// (kernel/time/sched_clock.c) to Go.
//
// [Now] returns nanoseconds since the package was initialised. It costs
// little more than reading the hardware counter (on which it makes no
// system call: the counter is read by one instruction), never allocates,
// and never waits for a writer: a reader finishes in
// a bounded number of steps even if the goroutine updating the clock is
// stopped half-way (preempted, descheduled, stopped in a debugger).
//
// # Guarantees
//
//   - Wait-free reads. The read data lives in a seqcount latch: two banked
//     copies, so one is always complete (see latch.go). A reader retries
//     only when a writer made progress.
//   - Monotonic. A Now that starts after another Now returned (in the
//     happens-before order of the Go memory model,
//     https://go.dev/ref/mem) returns at least as much, across Update,
//     Register, rate refinement, Suspend and Resume, wherever the writer
//     is stopped. This assumes the counter itself is monotonic across
//     CPUs, as an invariant TSC and the arm64 generic timer are.
//   - Exact. Update (the periodic fold that keeps counters from wrapping)
//     carries the sub-nanosecond remainder and moves time by nothing.
//     Register continues from the exact value the old counter reached.
//   - Safe arithmetic. A counter read below the epoch is clamped to it
//     rather than read as centuries ahead, and a refresh that comes too
//     late for 64-bit arithmetic is caught by a 128-bit path.
//
// # Counters
//
// On amd64 the default clock uses the TSC (LFENCE; RDTSC) when CPUID
// reports an invariant TSC and the kernel itself uses the TSC as its
// clocksource; on arm64 it uses CNTVCT_EL0 (ISB, then an ordering load).
// Elsewhere, in a purego build, or when the TSC is not trusted, it uses Go's
// monotonic clock, and Info().Rejected says why. Package initialisation
// never blocks: a rate that no CPU register gives is measured against
// CLOCK_MONOTONIC_RAW in the background, and until then the clock runs on
// Go's monotonic clock. The rate is then refined in the background to
// 1 ppm or better against CLOCK_MONOTONIC_RAW; [Clock.Info] reports where
// it came from and its estimated error.
//
// # Suspend
//
// [Clock.Suspend] freezes the clock at the value it had reached, without
// reading the counter until [Clock.Resume]; time then continues from that
// value and the suspended interval is not counted, like the kernel's
// sched_clock across system suspend.
//
// # Own clocks
//
// [New] runs a Clock on any [Source]: a counter read function, its width
// and its rate. A Clock folds its counter every refresh period from a
// goroutine of its own; [Clock.Close] stops it.
package schedclock
