//go:build gc && !purego && go1.26 && !go1.27

// Per-architecture code that cannot be shared: this file does for
// arm64 (AAPCS64 registers, ABI and stack rules) what call_linux_amd64.s
// does for amd64. The functions of the two files have the same outline
// (load the arguments, move onto the reserved frame, call, read the
// timespec, come back, store) in instructions that differ, and the
// duplicates command lists them as a pair. What is the same in both, the
// frame size and the fill pattern, is in call_linux.h.

#include "funcdata.h"
#include "textflag.h"
#include "call_linux.h"

// Go 1.26's runtime layout (runtime/runtime2.go; go_asm.h for
// GOARCH=arm64): the build constraint limits this file to go1.26 and
// checkCaller verifies the offsets at first use.
#define g_stack_lo 0 // g.stack.lo
#define stack_hi 8   // stack.hi
#define g_m 48       // g.m
#define m_gsignal 72 // m.gsignal

// After the prologue the frame is [RSP, RSP+8) for the saved LR and
// [RSP+8, RSP+8+VDSO_FRAME) for us (the saved FP is below RSP). reg gets
// the C function's stack top: the highest 16-byte aligned address that
// leaves the 16-byte timespec inside the frame. AAPCS64 wants SP 16-byte
// aligned whenever it is used (and Linux faults an unaligned SP-based
// access), so the alignment is the ABI's, not a courtesy.
#define C_STACK_TOP(reg) \
	ADD $(VDSO_FRAME+8-16), RSP, reg; \
	BIC $15, reg

// STORE_G_SLOT stores g at g.m.gsignal.stack.lo, where sigFetchG looks
// for it when a signal's PC is in the vDSO (see call_linux_arm64.go), and
// leaves the slot's address in R22 (callee-saved in AAPCS64: intact after
// the call) for CLEAR_G_SLOT, or 0 where there is no slot to fill: no
// gsignal (no signal stack, so no signal runs on one) or already on the
// signal stack (no nested signal), as the runtime's nanotime1 decides.
#define STORE_G_SLOT \
	MOVD g_m(g), R22; \
	MOVD m_gsignal(R22), R22; \
	CBZ  R22, slotdone; \
	CMP  g, R22; \
	BEQ  onsignalstack; \
	MOVD g_stack_lo(R22), R22; \
	MOVD g, (R22); \
	B    slotdone; \
onsignalstack: \
	MOVD ZR, R22; \
slotdone:

// CLEAR_G_SLOT empties the slot after the call, as the runtime does: the
// PC has left the vDSO, and a stale g must not outlive the call.
#define CLEAR_G_SLOT \
	CBZ  R22, 2(PC); \
	MOVD ZR, (R22)

// func callClockGettime(entry uintptr, clockid int32) (ns int64, ret int32)
//
// Not NOSPLIT: the prologue must grow the goroutine stack for the whole
// frame (see call_linux_amd64.go for why the rest is safe).
// NO_LOCAL_POINTERS: the frame holds no pointer. No stack walk that needs
// its map reaches it (the goroutine cannot stop inside the function past
// the prologue), but a frame with locals and no map is a fatal error to
// any that did.
TEXT ·callClockGettime(SB), 0, $5120-28
	NO_LOCAL_POINTERS
	MOVD entry+0(FP), R2
	MOVW clockid+8(FP), R0 // first C argument: the clock id
	MOVD RSP, R20          // the Go SP, for after the call: R20 is callee-saved in AAPCS64
	C_STACK_TOP(R1)        // second C argument: the timespec, at the C stack's top
	STORE_G_SLOT
	MOVD R1, RSP           // move onto the reserved frame: the C function's stack grows down inside it
	BL   (R2)              // clobbers LR: the epilogue reloads ours from the frame's bottom
	CLEAR_G_SLOT
	MOVD 0(RSP), R3        // tv_sec
	MOVD 8(RSP), R4        // tv_nsec
	MOVD R20, RSP          // back on the Go SP: FP-relative addressing is valid again
	MOVD $1000000000, R5
	MUL  R5, R3
	ADD  R4, R3
	MOVD R3, ns+16(FP)
	MOVW R0, ret+24(FP)
	RET

// func callClockGettimeMeasured(entry uintptr, clockid int32) (ns int64, ret int32, used uintptr, avail uintptr)
TEXT ·callClockGettimeMeasured(SB), 0, $5120-48
	NO_LOCAL_POINTERS
	MOVD entry+0(FP), R2
	MOVW clockid+8(FP), R0
	MOVD RSP, R20
	C_STACK_TOP(R1)
	MOVD STACK_PATTERN, R21 // R21 is callee-saved: still the pattern after the call
	ADD  $8, R20, R6        // the frame's bottom, above the saved LR

fill:
	CMP  R1, R6
	BHS  filled
	MOVD R21, (R6)
	ADD  $8, R6
	B    fill

filled:
	STORE_G_SLOT
	MOVD R1, RSP
	BL   (R2)
	CLEAR_G_SLOT
	MOVD 0(RSP), R3
	MOVD 8(RSP), R4
	MOVD RSP, R7 // the C stack's top, to measure from
	MOVD R20, RSP
	MOVD $1000000000, R5
	MUL  R5, R3
	ADD  R4, R3
	MOVD R3, ns+16(FP)
	MOVW R0, ret+24(FP)

	// The lowest doubleword the C function changed bounds its stack
	// use: scan up from the frame's bottom.
	ADD $8, R20, R6
	MOVD R6, R8 // the bottom, for avail

scan:
	CMP  R7, R6
	BHS  scanned
	MOVD (R6), R9
	CMP  R21, R9
	BNE  scanned
	ADD  $8, R6
	B    scan

scanned:
	SUB  R6, R7, R9
	MOVD R9, used+32(FP)
	SUB  R8, R7, R9
	MOVD R9, avail+40(FP)
	RET

// func abiProbe()
//
// A C-ABI function (R0 = clock id, R1 = *timespec, LR = return address)
// for the tests; see call_linux_arm64.go.
TEXT ·abiProbe(SB), NOSPLIT|NOFRAME, $0-0
	MOVD RSP, R3
	MOVD R3, ·probe+0(SB)  // entrySP
	MOVD R20, ·probe+8(SB) // goSP: the caller's saved Go SP
	MOVD g, ·probe+24(SB)
	MOVD ZR, R4
	MOVD g_m(g), R3
	MOVD m_gsignal(R3), R3
	CBZ  R3, noslot
	MOVD g_stack_lo(R3), R3
	MOVD (R3), R4          // the g slot's word during the call

noslot:
	MOVD R4, ·probe+16(SB)
	MOVD R0, 0(R1)         // tv_sec = clock id
	MOVD $123456789, R3
	MOVD R3, 8(R1)         // tv_nsec
	NEGW R0, R0            // return -clockid
	// Clobber what a C function may: every other caller-saved register.
	MOVD $-1, R1
	MOVD R1, R2
	MOVD R1, R3
	MOVD R1, R4
	MOVD R1, R5
	MOVD R1, R6
	MOVD R1, R7
	MOVD R1, R8
	MOVD R1, R9
	MOVD R1, R10
	MOVD R1, R11
	MOVD R1, R12
	MOVD R1, R13
	MOVD R1, R14
	MOVD R1, R15
	MOVD R1, R16
	MOVD R1, R17
	RET

// func abiProbeAddr() uintptr
TEXT ·abiProbeAddr(SB), NOSPLIT|NOFRAME, $0-8
	MOVD $·abiProbe(SB), R0
	MOVD R0, ret+0(FP)
	RET

// func gsignalStack() (lo uintptr, hi uintptr, gm uintptr, gsignalM uintptr)
TEXT ·gsignalStack(SB), NOSPLIT|NOFRAME, $0-32
	MOVD ZR, R1
	MOVD ZR, R2
	MOVD ZR, R4
	MOVD g_m(g), R0
	CBZ  R0, done
	MOVD m_gsignal(R0), R3
	CBZ  R3, done
	MOVD g_stack_lo(R3), R1
	MOVD stack_hi(R3), R2
	MOVD g_m(R3), R4

done:
	MOVD R1, lo+0(FP)
	MOVD R2, hi+8(FP)
	MOVD R0, gm+16(FP)
	MOVD R4, gsignalM+24(FP)
	RET

// func gSlot() uintptr
TEXT ·gSlot(SB), NOSPLIT|NOFRAME, $0-8
	MOVD ZR, R1
	MOVD g_m(g), R0
	CBZ  R0, done
	MOVD m_gsignal(R0), R0
	CBZ  R0, done
	MOVD g_stack_lo(R0), R0
	MOVD (R0), R1

done:
	MOVD R1, ret+0(FP)
	RET
