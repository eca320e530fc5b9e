//go:build gc && !purego

#include "go_asm.h"
#include "textflag.h"

// Ordering of RDTSC, both ways. A reader needs its counter value taken
// after its loads of the latch bank and before its seq re-check.
//
//   - Before: Intel SDM Vol. 2B, "RDTSC": "It does not necessarily wait
//     until all previous instructions have been executed before reading
//     the counter"; LFENCE immediately before it waits for the earlier
//     instructions and loads. AMD APM Vol. 3 (24594), "RDTSC": "This
//     instruction is not serializing. Therefore, there is no guarantee that
//     all instructions have completed at the time the time-stamp counter
//     is read." (LFENCE is dispatch serializing on AMD where the kernel
//     enables it, X86_FEATURE_LFENCE_RDTSC; the kernel's rdtsc_ordered is
//     the same LFENCE; RDTSC.)
//   - After: the same SDM entry goes on "Similarly, subsequent
//     instructions may begin execution before the read operation is
//     performed", and offers LFENCE after RDTSC for software that needs
//     them, "including any memory accesses", to wait. The re-check is such
//     a memory access. Instead of a second LFENCE, both readers below
//     make a load carry the counter value in its address: it cannot be
//     performed before RDTSC has produced the value, and x86 keeps later
//     loads after it (SDM Vol. 3A, "Memory Ordering in P6 and More Recent
//     Processor Families": "Reads are not reordered with other reads";
//     AMD APM Vol. 2, "Memory Access Ordering": loads do not pass previous
//     loads). tscNow's re-check is that load; readTSC, whose caller
//     re-checks in Go, makes a dummy one (as orderAfter does for the
//     portable source).

// func readTSC() uint64
TEXT ·readTSC(SB), NOSPLIT|NOFRAME, $0-8
	LFENCE // RDTSC waits until the earlier loads of the latch bank have completed.
	RDTSC
	SHLQ $32, DX
	ORQ  DX, AX
	MOVQ AX, CX
	ANDQ $0, CX          // CX = 0, data-dependent on the counter value.
	MOVQ 0(SP)(CX*1), CX // a load that cannot be performed before RDTSC has read the counter: the caller's later loads (its seq re-check) are ordered after it.
	MOVQ AX, ret+0(FP)
	RET

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
