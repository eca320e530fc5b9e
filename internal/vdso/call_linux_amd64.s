//go:build gc && !purego

// Per-architecture code that cannot be shared: this file does for
// amd64 (SysV registers, ABI and stack rules) what call_linux_arm64.s
// does for arm64. The functions of the two files have the same outline
// (load the arguments, move onto the reserved frame, call, read the
// timespec, come back, store) in instructions that differ, and the
// duplicates command lists them as a pair. What is the same in both, the
// frame size and the fill pattern, is in call_linux.h.

#include "funcdata.h"
#include "textflag.h"
#include "call_linux.h"

// After the prologue the frame is [SP, SP+VDSO_FRAME) (the assembler
// keeps the caller's BP and the return address above it). C_STACK_TOP
// sets reg to the C function's stack top: the highest 16-byte aligned
// address that leaves the 16-byte timespec inside the frame. The C
// function's stack grows down from there, through the rest of the frame.
// The alignment is the SysV ABI's: RSP is 16-byte aligned at a CALL (so
// RSP+8 is, at the callee's entry); Go keeps SP only 8-byte aligned.
#define C_STACK_TOP(reg) \
	LEAQ (VDSO_FRAME-16)(SP), reg; \
	ANDQ $~15, reg

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
	MOVQ entry+0(FP), AX
	MOVL clockid+8(FP), DI // first C argument: the clock id
	MOVQ SP, R12           // the Go SP, for after the call: R12 is callee-saved in the SysV ABI
	C_STACK_TOP(SI)        // second C argument: the timespec, at the C stack's top
	MOVQ SI, SP            // move onto the reserved frame: the C function's pushes land inside it
	CALL AX
	MOVQ 0(SP), CX         // tv_sec
	MOVQ 8(SP), DX         // tv_nsec
	MOVQ R12, SP           // back on the Go SP: FP-relative addressing is valid again
	IMULQ $1000000000, CX
	ADDQ DX, CX
	MOVQ CX, ns+16(FP)
	MOVL AX, ret+24(FP)
	RET

// func callClockGettimeMeasured(entry uintptr, clockid int32) (ns int64, ret int32, used uintptr, avail uintptr)
TEXT ·callClockGettimeMeasured(SB), 0, $5120-48
	NO_LOCAL_POINTERS
	MOVQ entry+0(FP), AX
	MOVL clockid+8(FP), DI
	MOVQ SP, R12
	C_STACK_TOP(SI)
	MOVQ STACK_PATTERN, R13 // R13 is callee-saved: still the pattern after the call
	MOVQ R12, R8

fill:
	CMPQ R8, SI
	JAE  filled
	MOVQ R13, (R8)
	ADDQ $8, R8
	JMP  fill

filled:
	MOVQ SI, SP
	CALL AX
	MOVQ 0(SP), CX
	MOVQ 8(SP), DX
	MOVQ SP, BX    // the C stack's top, to measure from
	MOVQ R12, SP
	IMULQ $1000000000, CX
	ADDQ DX, CX
	MOVQ CX, ns+16(FP)
	MOVL AX, ret+24(FP)

	// The lowest word the C function changed bounds its stack use
	// (its return address included): scan up from the frame's bottom.
	MOVQ R12, R8

scan:
	CMPQ R8, BX
	JAE  scanned
	CMPQ R13, (R8)
	JNE  scanned
	ADDQ $8, R8
	JMP  scan

scanned:
	MOVQ BX, CX
	SUBQ R8, CX
	MOVQ CX, used+32(FP)
	SUBQ R12, BX
	MOVQ BX, avail+40(FP)
	RET

// func abiProbe()
//
// A C-ABI function (DI = clock id, SI = *timespec) for the tests; see
// call_linux_amd64.go. NOFRAME: its entry RSP is what it records.
TEXT ·abiProbe(SB), NOSPLIT|NOFRAME, $0-0
	MOVQ SP, ·probe+0(SB)  // entrySP
	MOVQ R12, ·probe+8(SB) // goSP: the caller's saved Go SP
	MOVQ DI, 0(SI)         // tv_sec = clock id
	MOVQ $123456789, 8(SI) // tv_nsec
	MOVL DI, AX
	NEGL AX                // return -clockid
	// Clobber what a C function may: every other caller-saved register.
	MOVQ $-1, CX
	MOVQ CX, DX
	MOVQ CX, SI
	MOVQ CX, DI
	MOVQ CX, R8
	MOVQ CX, R9
	MOVQ CX, R10
	MOVQ CX, R11
	RET

// func abiProbeAddr() uintptr
TEXT ·abiProbeAddr(SB), NOSPLIT|NOFRAME, $0-8
	LEAQ ·abiProbe(SB), AX
	MOVQ AX, ret+0(FP)
	RET

// func callClockGettimeShifted(entry uintptr, clockid int32) (ns int64, ret int32)
//
// callClockGettime called from a frame 8 bytes deeper than a Go caller's
// would be ($40 where the arguments need 32): Go code keeps SP at one
// alignment mod 16, and the tests need the other too. NO_LOCAL_POINTERS:
// this frame is under callClockGettime's when that one's prologue grows
// the stack, and copystack needs its map (without one, -race runs died
// with "fatal error: missing stackmap").
TEXT ·callClockGettimeShifted(SB), 0, $40-28
	NO_LOCAL_POINTERS
	MOVQ entry+0(FP), AX
	MOVQ AX, 0(SP)
	MOVL clockid+8(FP), AX
	MOVL AX, 8(SP)
	CALL ·callClockGettime(SB)
	MOVQ 16(SP), AX
	MOVQ AX, ns+16(FP)
	MOVL 24(SP), AX
	MOVL AX, ret+24(FP)
	RET
