//go:build gc && !purego && go1.26 && !go1.27

package vdso

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The call into the vDSO, linux/arm64 (call_linux_arm64.s).
//
// The stack, preemption, GC, traceback and SIGPROF arguments are those of
// call_linux_amd64.go (AAPCS64 wants SP 16-byte aligned at all times; the
// Go SP is kept in R20, callee-saved in AAPCS64; the assembler marks the
// function SPWRITE in cmd/internal/obj/arm64/obj7.go). arm64 adds one
// hazard: where the signal handler finds g.
//
// On arm64 g lives in R28. AAPCS64 makes R28 callee-saved, so the C code
// restores it before returning, but it may use it in between; the
// runtime therefore does not trust R28 when a signal's PC is in the vDSO.
// runtime/signal_unix.go, sigFetchG (called first thing by sigtrampgo and
// by sigfwdgo), for arm, arm64, loong64, ppc64x, riscv64 and s390x:
//
//	if !iscgo && inVDSOPage(c.sigpc()) {
//		// ... before making a VDSO call we save the g to the
//		// bottom of the signal stack. Fetch from there.
//		sp := sys.GetCallerSP()
//		s := spanOf(sp)
//		if s != nil && s.state.get() == mSpanManual && s.base() < sp && sp < s.limit {
//			gp := *(**g)(unsafe.Pointer(s.base()))
//			return gp
//		}
//		return nil
//	}
//
// and the runtime's own call stores it there (runtime/sys_linux_arm64.s,
// nanotime1 and walltime):
//
//	MOVD	m_gsignal(R21), R22          // g.m.gsignal
//	CBZ	R22, nosaveg
//	CMP	g, R22
//	BEQ	nosaveg
//	MOVD	(g_stack+stack_lo)(R22), R22 // g.m.gsignal.stack.lo
//	MOVD	g, (R22)
//	BL	(R2)
//	MOVD	ZR, (R22)  // clear g slot, R22 is unchanged by C code
//
// A call that skips the store leaves 0 there (the runtime clears it), so
// sigtrampgo gets a nil g. SIGPROF then goes to sigprofNonGoPC and SIGURG
// (preemption) is dropped, but any other signal Go handles (SIGCHLD,
// SIGWINCH, a signal.Notify'd SIGINT or SIGUSR1) goes to badsignal, which
// without cgo's extra M prints "fatal: bad g in signal handler" and exits
// with status 2. TestABIProbe checks the slot during the call under any
// qemu; TestSignalStorm shows the crash where the runtime sees the vDSO
// page: on arm64 hardware, and under qemu 10 only with a one-line runtime
// fix (testdata/qemu10-storm.sh applies it, and the mutation, through
// go test -overlay). The stock runtime places the page at the load
// address plus p_offset - p_vaddr of the first PT_LOAD
// (runtime/vdso_linux.go, vdsoInitFromSysinfoEhdr), right for a kernel's
// image linked at 0, but qemu 10 relocates its image's program headers to
// the load address, so the runtime's page starts at 0: inVDSOPage is
// false there, sigFetchG trusts R28 (which qemu's vDSO leaves alone) and
// profiles charge vDSO time to _ExternalCode.
//
// So this call stores g in the slot as the runtime does, through Go
// 1.26's layout (runtime/runtime2.go; the offsets are those of go_asm.h
// for GOARCH=arm64): g.stack.lo at 0, g.m at 48, m.gsignal at 72. The
// file is built for go1.26 only (the build constraint); another Go
// version gets the system call and says so in Path (call_other.go). At
// first use checkCaller compares the signal stack read through those
// offsets with the kernel's answer, sigaltstack(2) on a locked thread,
// and a mismatch also falls back to the system call.
//
// cgo: with runtime/cgo linked (iscgo), sigtramp loads g from TLS and
// sigFetchG skips the slot, so the store is not needed; it is harmless
// (the runtime's gsignal stack, or a C thread's sigaltstack adopted as
// gsignal's, is not in use while this thread runs Go code), and doing it
// always avoids reading runtime.iscgo, which only go:linkname could reach.

// callerBuilt says that this build can call the vDSO.
const callerBuilt = true

// reservedFrame: see call_linux_amd64.go. The arm64 frame is laid out
// [RSP, RSP+8) saved LR, [RSP+8, RSP+8+reservedFrame) the C function's;
// it gets at least reservedFrame-16-15 bytes below its timespec.
const reservedFrame = 5120

// callClockGettime: see call_linux_amd64.go.
func callClockGettime(entry uintptr, clockid int32) (ns int64, ret int32)

// callClockGettimeMeasured: see call_linux_amd64.go.
func callClockGettimeMeasured(entry uintptr, clockid int32) (ns int64, ret int32, used, avail uintptr)

// abiProbe: see call_linux_amd64.go; the arm64 probe also records the g
// slot's word and g, to show the slot holds g during the call.
//
//lint:ignore U1000 only assembly refers to it (abiProbeAddr)
func abiProbe()

func abiProbeAddr() uintptr

var probe struct {
	entrySP, goSP uintptr
	slot, g       uintptr
}

// gsignalStack reads, through the offsets the call uses, the current
// M's signal stack (g.m.gsignal.stack) and two pointers that must agree:
// g.m and g.m.gsignal.m. All zero when there is no M or no gsignal.
func gsignalStack() (lo, hi, gm, gsignalM uintptr)

// gSlot returns the word at g.m.gsignal.stack.lo (the g slot), for the
// tests: 0 outside a vDSO call.
func gSlot() uintptr

// stackT is the kernel's stack_t (include/uapi/asm-generic/signal.h).
type stackT struct {
	sp    uintptr
	flags int32
	_     int32
	size  uintptr
}

const ssDisable = 2 // SS_DISABLE

var errGSlot = errors.New("g slot layout check failed")

// checkCaller verifies, on a thread locked for the purpose, that the
// signal stack read through Go 1.26's offsets is the one the kernel has
// for the thread.
func checkCaller() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var ss stackT
	if _, _, errno := unix.RawSyscall(unix.SYS_SIGALTSTACK, 0, uintptr(unsafe.Pointer(&ss)), 0); errno != 0 {
		return fmt.Errorf("%w: sigaltstack: %v", errGSlot, errno)
	}
	lo, hi, gm, gsignalM := gsignalStack()
	return compareSignalStack(ss, lo, hi, gm, gsignalM)
}

// compareSignalStack checks what the offsets gave against the kernel's
// stack_t for the same thread.
func compareSignalStack(ss stackT, lo, hi, gm, gsignalM uintptr) error {
	switch {
	case ss.flags&ssDisable != 0:
		return fmt.Errorf("%w: the thread has no signal stack", errGSlot)
	case gm == 0 || gsignalM != gm:
		return fmt.Errorf("%w: g.m %#x, g.m.gsignal.m %#x", errGSlot, gm, gsignalM)
	case lo != ss.sp || hi-lo != ss.size:
		return fmt.Errorf("%w: g.m.gsignal.stack [%#x, %#x), sigaltstack [%#x, +%#x)", errGSlot, lo, hi, ss.sp, ss.size)
	}
	return nil
}

// noCallerReason is only asked when there is no caller (call_other.go).
func noCallerReason() string { return "" }
