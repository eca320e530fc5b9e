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

convert:
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

recheck:
	CMPQ   R9, latch_seq(DI)(R10*1)
	JNE    retry
	MOVQ   AX, ret+8(FP)
	RET

slow:
	JMP ·genericNow(SB)

	// A bank that reads the pvclock page (Paravirt's readPvclock): the
	// page read of internal/pvclock's Read (vread_pvclock's protocol)
	// inline, its result the counter value of the conversion above (by
	// one add where the line is a pure offset, the default clock's), on
	// the page version the shared Source checked against its reference
	// (paravirtSource.state: an odd version, or a Source off the page,
	// never matches) and never below the Source's floor. Only the first
	// try is made here: a version not checked yet, a changed version, a
	// TSC below the page's stamp or a reading below the floor hands over
	// to otherNow, whose call of readPvclock checks, retries (bounded),
	// falls back or returns to the page.
other:
	MOVQ    ·pvclockReadPtr(SB), R11
	CMPQ    bank_read(SI), R11
	JNE     otherGo
	MOVQ    ·pvclockShared+8(SB), R11 // the shared paravirtSource
	MOVQ    ·pvclockShared+0(SB), BX // the page
	MOVL    0(BX), R12 // version, zero-extended
	CMPQ    R12, paravirtSource_state(R11) // the version the Source checked (PVCLOCK_TSC_STABLE_BIT included: the host changes flags only with the version)
	JNE     otherGo
	MOVQ    8(BX), R13 // tsc_timestamp
	MOVBQSX 28(BX), CX // tsc_shift
	LFENCE  // RDTSC waits until the loads of seq, the bank's read function, the Source's state and the page's version and stamp have completed.
	RDTSC
	SHLQ    $32, DX
	ORQ     DX, AX
	MOVQ    AX, R10
	ANDQ    $0, R10 // R10 = 0, data-dependent on the TSC value: the version and seq re-checks cannot be satisfied before RDTSC.
	SUBQ    R13, AX
	MOVQ    AX, DX
	SHRQ    $62, DX
	JNE     otherGo // below the page's stamp: no motion, which readPvclock returns
	TESTQ   CX, CX
	JLT     pvShiftRight
	SHLQ    CX, AX
	JMP     pvScale

pvShiftRight:
	NEGQ CX
	SHRQ CX, AX

pvScale:
	// (delta * mul) >> 32 modulo 2^64, what MULQ then SHRQ $32, DX, AX
	// give, as (delta>>32)*mul + ((delta & (2^32-1))*mul)>>32: two
	// independent multiplies, a shorter chain than MULQ then SHRD.
	MOVL  24(BX), DX // tsc_to_system_mul; the version re-check below covers this load too
	MOVQ  AX, R13
	SHRQ  $32, R13
	IMULQ DX, R13
	MOVL  AX, AX
	IMULQ DX, AX
	SHRQ  $32, AX
	ADDQ  R13, AX
	ADDQ 16(BX), AX // system_time
	CMPL R12, 0(BX)(R10*1) // pvclock_read_retry
	JNE  otherGo
	TESTQ AX, AX
	JMI   otherGo // bit 63 set: readPvclock masks it (& S64_MAX, as the vDSO does); testing it keeps the mask off the result's chain
	CMPQ AX, paravirtSource_floor(R11)
	JCS  otherGo // below the Source's floor: readPvclock returns the floor

	// A line that is a pure offset (the page's nanoseconds are the
	// clock's, shifted: the default clock's) converts by one add,
	// convert's result for every reading within fastMax of the epoch
	// (bank.offset); any other line converts at convert.
	MOVQ  bank_offset(SI), DX
	TESTQ DX, DX
	JEQ   convert
	MOVQ  AX, R13
	SUBQ  bank_epochCyc(SI), R13
	CMPQ  R13, bank_fastMax(SI)
	JHI   convert
	ADDQ  DX, AX
	JMP   recheck

otherGo:
	JMP ·otherNow(SB)
