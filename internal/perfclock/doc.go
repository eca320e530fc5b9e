// Package perfclock reads perf's own clock from user space, where the
// kernel exports it: the first page of a perf event's mapping
// (struct perf_event_mmap_page, include/uapi/linux/perf_event.h) carries,
// when its cap_user_time_zero bit is set, the conversion from the
// hardware counter (the TSC, CNTVCT on arm64) to perf's clock, the
// kernel's sched_clock, which a plain perf record stamps its events with:
//
//	time = time_zero + (cyc>>time_shift)*time_mult + ((cyc&mask)*time_mult)>>time_shift
//
// (tools/perf/util/tsc.c's tsc_to_perf_time, whose quotient/remainder
// split keeps the product in 64 bits). The kernel sets the bit only when
// its sched_clock is the counter's (arch_perf_update_userpage): a kernel
// on the TSC, or arm64's generic timer; not a kvm-clock guest, whose
// sched_clock reads the hypervisor's page.
package perfclock
