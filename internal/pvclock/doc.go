// Package pvclock reads the hypervisor's clock pages from user space, as
// the x86 vDSO does: the KVM/Xen pvclock page (struct
// pvclock_vcpu_time_info, read by vread_pvclock in
// arch/x86/include/asm/vdso/gettimeofday.h) and the Hyper-V reference TSC
// page (struct ms_hyperv_tsc_page, read by hv_read_tsc_page_tsc in
// include/clocksource/hyperv_timer.h).
//
// It has three parts: Locate finds where the kernel maps the pages in
// this process (the [vvar_vclock] mapping of Linux 6.13 and later, the
// [vvar] mapping of Linux 5.6 to 6.12) from /proc/self/maps; Probe proves
// a page mapped and plausible without ever touching it from user mode
// (an unmapped vclock page is SIGBUS, fatal to a Go program); and the
// readers convert the TSC with the page's parameters under the page's
// own version protocol, in assembly on amd64 (Read) and in Go (ReadWith,
// the reference, given the TSC read to use). The readers read a TSC
// below the page's stamp as no motion (the page's system_time), as the
// kernel's vdso_calc_ns does, and refuse a scale no hypervisor writes
// (Scalable), as they refuse a page under update.
//
// The package answers with reasons of its own (ErrNoPage, ErrLayout,
// ErrImplausible); the root package wraps them in its ErrUnsupported or
// ErrUntrusted.
package pvclock
