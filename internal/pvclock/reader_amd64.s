//go:build gc && !purego

#include "textflag.h"

// Offsets in struct pvclock_vcpu_time_info (page.go's Page).
#define PV_VERSION 0
#define PV_TSC_TIMESTAMP 8
#define PV_SYSTEM_TIME 16
#define PV_MUL 24
#define PV_SHIFT 28
#define PV_FLAGS 29
#define PV_STABLE 1 // PVCLOCK_TSC_STABLE_BIT
#define MAX_TRIES 1024 // page.go's maxTries
#define MAX_SHIFT 31 // page.go's maxShift

// func TSC() uint64
TEXT ·TSC(SB), NOSPLIT|NOFRAME, $0-8
	LFENCE // RDTSC waits until the caller's earlier loads (the page's fields) have completed.
	RDTSC
	SHLQ $32, DX
	ORQ  DX, AX
	MOVQ AX, ret+0(FP)
	RET

// Read is vread_pvclock (arch/x86/include/asm/vdso/gettimeofday.h) with
// __pvclock_read_cycles and pvclock_scale_delta (arch/x86/include/asm/
// pvclock.h) in registers, step for step, and page.go's two refusals
// (Scalable, Time's no motion below the stamp):
//
//	version = page.version &^ 1   // pvclock_read_begin; an odd version
//	                              // (update in flight) cannot match below
//	if flags & STABLE == 0: return !ok
//	if mul == 0 || shift outside -31..31:
//	        if page.version == version: return !ok  // not time
//	        again                                   // torn: under update
//	delta = rdtsc_ordered() - tsc_timestamp
//	if delta >> 62 != 0: delta = 0 // below the stamp: no motion
//	delta <<= shift (>>= -shift when negative)
//	ns = system_time + (delta * mul) >> 32   // 128-bit product (MULQ)
//	if page.version != version: again        // pvclock_read_retry
//	return ns & S64_MAX
//
// x86 keeps loads in order, so the kernel's smp_rmb()s are compiler
// barriers only; the TSC read needs LFENCE before it to follow the field
// loads. After it, the version re-check's address carries the TSC value
// (a zero derived from it), so the re-check cannot be satisfied before
// RDTSC has read the counter: stronger than the vDSO, which lets that
// load pass RDTSC, and the same trick as clockNow's seq re-check
// (source_tsc_amd64.s says why it orders).
//
// func Read(pg *Page) (ns uint64, version uint32, ok bool)
TEXT ·Read(SB), NOSPLIT|NOFRAME, $0-21
	MOVQ pg+0(FP), DI
	MOVL $MAX_TRIES, R8

retry:
	MOVL    PV_VERSION(DI), R9
	ANDL    $~1, R9
	TESTB   $PV_STABLE, PV_FLAGS(DI)
	JEQ     fail
	MOVQ    PV_TSC_TIMESTAMP(DI), R10
	MOVQ    PV_SYSTEM_TIME(DI), R11
	MOVL    PV_MUL(DI), BX
	MOVBQSX PV_SHIFT(DI), CX
	TESTL   BX, BX
	JEQ     unscalable
	LEAQ    MAX_SHIFT(CX), DX
	CMPQ    DX, $(2*MAX_SHIFT)
	JHI     unscalable
	LFENCE  // RDTSC waits until the loads of the version and the fields have completed.
	RDTSC
	SHLQ    $32, DX
	ORQ     DX, AX
	MOVQ    AX, SI
	ANDQ    $0, SI // SI = 0, data-dependent on the TSC value: the version re-check cannot be satisfied before RDTSC.
	SUBQ    R10, AX
	MOVQ    AX, DX
	SHRQ    $62, DX
	JEQ     forward
	XORL    AX, AX // below the stamp: no motion

forward:
	TESTQ CX, CX
	JLT   shiftRight
	SHLQ  CX, AX
	JMP   scale

shiftRight:
	NEGQ CX
	SHRQ CX, AX

scale:
	MULQ BX              // DX:AX = delta * mul
	SHRQ $32, DX, AX     // AX = (DX:AX) >> 32, the low 64 bits of it
	ADDQ R11, AX
	CMPL R9, PV_VERSION(DI)(SI*1)
	JNE  again
	BTRQ $63, AX         // ns & S64_MAX, as the vDSO returns it
	MOVQ AX, ns+8(FP)
	MOVL R9, version+16(FP)
	MOVB $1, ok+20(FP)
	RET

unscalable:
	CMPL R9, PV_VERSION(DI)
	JEQ  fail // the page as published: not time

again:
	DECL R8
	JNE  retry

fail:
	MOVQ $0, ns+8(FP)
	MOVL R9, version+16(FP)
	MOVB $0, ok+20(FP)
	RET
