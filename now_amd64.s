//go:build gc && !purego

#include "go_asm.h"
#include "textflag.h"

// The ordering of RDTSC, both ways, is argued in source_tsc_amd64.s;
// clockNow makes its seq re-check the dependent load that argument needs.

// clockNow is Clock.Now on amd64: the whole reader protocol of latch.go in registers
// for a bank that reads the TSC, because a Go call to the read function
// would make the compiler spill and reload every live value around it,
// and a Go wrapper around an assembly reader would add its own frame. It
// never waits: it retries only if seq changed. Every other case leaves
// by a tail call to a Go reader with the same arguments: a bank that
// reads another counter to otherNow (the portable source's reader, or the
// generic one), and a TSC reading outside the fast path's range to
// genericNow, which reads the TSC again through readTSC and converts it
// with slowNanos.
//
// func clockNow(c *Clock) int64
TEXT ·clockNow(SB), NOSPLIT|NOFRAME, $0-16
	MOVQ c+0(FP), DI // the latch is the Clock's first field
	MOVQ ·tscReadPtr(SB), R8

retry:
	MOVQ  latch_seq(DI), R9
	LEAQ  latch_banks(DI), SI
	TESTQ $1, R9
	JEQ   bank0
	ADDQ  $bank__size, SI

bank0:
	CMPQ   bank_read(SI), R8
	JNE    other
	LFENCE // RDTSC waits until the loads of seq and of the bank's read function have completed.
	RDTSC
	SHLQ   $32, DX
	ORQ    DX, AX
	MOVQ   AX, R10
	ANDQ   $0, R10 // R10 = 0, data-dependent on the counter value: the seq re-check below cannot be satisfied before RDTSC has read the counter.
	MOVQ   AX, DX
	SUBQ   bank_epochCyc(SI), DX
	CMPQ   DX, bank_fastMax(SI)
	JHI    slow
	MOVQ   bank_scale(SI), CX
	MOVQ   CX, BX
	SHRQ   $32, BX
	IMULQ  BX, AX
	ADDQ   bank_base(SI), AX
	SHRQ   $8, CX
	SHRQ   CX, AX
	ADDQ   bank_epochNs(SI), AX
	CMPQ   R9, latch_seq(DI)(R10*1)
	JNE    retry
	MOVQ   AX, ret+8(FP)
	RET

slow:
	JMP ·genericNow(SB)

other:
	JMP ·otherNow(SB)
