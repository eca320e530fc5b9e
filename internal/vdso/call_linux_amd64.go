//go:build gc && !purego

package vdso

// The call into the vDSO, linux/amd64 (call_linux_amd64.s).
//
// Why it is safe to run C code on a goroutine stack here, from the
// runtime's source (Go 1.26):
//
//   - Stack: the function reserves a frame of reservedFrame bytes and is
//     not NOSPLIT, so its prologue grows the goroutine stack until the
//     whole frame fits before any of it is used. The C function runs
//     with RSP at the frame's top (16-byte aligned, as the SysV ABI
//     wants at a CALL) and its stack grows down inside the frame. Signal
//     handlers do not land there: the runtime installs every handler with
//     SA_ONSTACK and gives each M a signal stack (runtime/signal_unix.go,
//     minitSignalStack), so the kernel builds signal frames there.
//   - Async preemption and the GC: a goroutine is preempted, and its
//     stack scanned or moved, only at a safe point; isAsyncSafePoint
//     (runtime/preempt.go) refuses a PC outside Go code ("Not Go code")
//     and any PC in an assembly function (FuncFlagAsm), so neither can
//     happen between the prologue and the RET. Stack growth happens only
//     in the prologue, before SP moves.
//   - Tracebacks: writing SP makes the assembler mark the function
//     SPWRITE (cmd/internal/obj/x86/obj6.go). The unwinder
//     (runtime/traceback.go, resolveInternal) stops at an SPWRITE frame
//     in a profiling traceback (unwindSilentErrors), and accepts it as
//     the innermost frame of a precise one, which can only start at the
//     prologue's call to morestack, where SP has not moved yet.
//   - SIGPROF: sigprof (runtime/proc.go) unwinds from the signal's PC.
//     In the vDSO's code, findfunc fails, the silent unwinder records no
//     frame and the sample is charged to runtime._VDSO (inVDSOPage: the
//     runtime found the same image at startup); in this function, after
//     SP moved, the sample holds this function alone (SPWRITE). The
//     runtime's own vDSO calls set m.vdsoPC/vdsoSP so that samples show
//     the Go caller; those fields are the runtime's, not ours to write.
//   - g: on amd64 the signal handler takes g from thread-local storage
//     (sigtramp, runtime/sys_linux_amd64.s), never from a register the C
//     code may have reused, so nothing needs saving for it (compare
//     call_linux_arm64.go).
//
// What is left to the ABI: the function is ABI0, so its Go callers expect
// every register clobbered (the compiler restores R14 and X15 after an
// ABI0 call); the Go SP is kept in R12, which SysV makes callee-saved.

// callerBuilt says that this build can call the vDSO.
const callerBuilt = true

// reservedFrame is the stack, in bytes, the call reserves for the C
// function (VDSO_FRAME in call_linux_amd64.s). The C function gets at
// least reservedFrame-16-15 = 5089 bytes below its timespec.
//
// Measured (TestCalleeStackUse: the frame filled with a pattern, the
// overwritten bytes counted after the call): the 6.18 kernel's x86-64
// vDSO uses 32 bytes for every clock, its return address included; qemu
// 10's aarch64 vDSO uses none. A kernel built with -fstack-check needs a
// page more: the runtime's nanotime1 (runtime/sys_linux_amd64.s) says
// so, and the vDSO of one such kernel (a CoreOS build) pushed 40
// bytes, then `sub $0x1038, %rsp; orq $0, (%rsp)`: a write 4192 bytes
// below its entry, 4200 in the count above.
// 5 KiB covers that with close to 900 bytes to spare, and keeps what a
// reader's goroutine stack must grow to at 8 KiB (the frame, the
// prologue's 800-byte guard and the callers' frames).
const reservedFrame = 5120

// callClockGettime calls the C function clock_gettime at entry with
// clockid and a timespec in its frame, and returns the timespec in
// nanoseconds and the function's return value (0 or -errno).
func callClockGettime(entry uintptr, clockid int32) (ns int64, ret int32)

// callClockGettimeMeasured is callClockGettime that first fills the C
// function's stack with a pattern and, after the call, reports how many
// bytes below the timespec the function overwrote (used) out of the
// bytes it had (avail). For the tests.
func callClockGettimeMeasured(entry uintptr, clockid int32) (ns int64, ret int32, used, avail uintptr)

// callClockGettimeShifted is callClockGettime called with SP 8 bytes
// off the alignment Go code keeps, for the tests.
func callClockGettimeShifted(entry uintptr, clockid int32) (ns int64, ret int32)

// abiProbe is a C-ABI stand-in for clock_gettime that tests pass to
// callClockGettime (its address comes from abiProbeAddr): it records the
// stack it was given in probe, writes tv_sec = clockid and tv_nsec =
// 123456789, returns -clockid and clobbers every register the C ABI lets
// a callee clobber. Never call it from Go.
//
//lint:ignore U1000 only assembly refers to it (abiProbeAddr)
func abiProbe()

// abiProbeAddr returns abiProbe's ABI0 entry (a Go func value would
// point at an ABIInternal wrapper).
func abiProbeAddr() uintptr

// probe is what abiProbe saw at its entry: its stack pointer and the
// caller's saved Go stack pointer (R12). Written by abiProbe, read by
// the tests.
var probe struct {
	entrySP, goSP uintptr
	slot, g       uintptr // arm64 only: the g slot's word and g
}

// checkCaller vets the caller before its first use; on amd64 there is
// nothing the call depends on beyond the ABI.
func checkCaller() error { return nil }

// noCallerReason is only asked when there is no caller (call_other.go).
func noCallerReason() string { return "" }
