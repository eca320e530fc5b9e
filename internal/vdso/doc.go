// Package vdso reads the kernel's clocks through the vDSO from Go, without
// cgo: CLOCK_MONOTONIC_RAW and CLOCK_BOOTTIME at the vDSO's cost (about
// 20 ns) rather than a system call's (a microsecond or more), which
// unix.ClockGettime is; the runtime's own vDSO call serves only
// CLOCK_MONOTONIC and CLOCK_REALTIME.
//
// Open returns a Clock for a clock id. The first Open finds the vDSO (the
// auxiliary vector's AT_SYSINFO_EHDR), looks up its clock_gettime
// (__vdso_clock_gettime, LINUX_2.6, on amd64; __kernel_clock_gettime,
// LINUX_2.6.39, on arm64) with a parser that checks every offset of the
// image, and keeps the address; importing the package does nothing. Now
// then calls it from assembly, on a frame reserved on the goroutine
// stack, the C ABI's way (call_linux_amd64.go and call_linux_arm64.go say
// why that is safe with the profiler, the GC, preemption and signals, from
// the runtime's source).
//
// Where the vDSO cannot be used (no vDSO: qemu-user before 8, vdso=0; no
// such symbol; a malformed image; a GOARCH or Go version without a
// caller here; the purego build tag) a Clock reads through the
// clock_gettime system call, and Path says which path and why. Off Linux,
// darwin and FreeBSD read through their clock_gettime; the clocks they
// lack, and every clock elsewhere, are ErrUnsupported.
//
// A Clock's Now is the body of a counter read: it allocates nothing, and
// the readings are the clock's nanoseconds, as monotonic as the clock
// itself (CLOCK_REALTIME is not). For a schedclock Source:
//
//	c, err := vdso.Open(vdso.MonotonicRaw)
//	if err != nil { ... }
//	src := schedclock.Source{Name: "CLOCK_MONOTONIC_RAW (" + c.Path() + ")",
//		Read: func() uint64 { return uint64(c.Now()) }, Bits: 64, Rate: 1e9}
package vdso
