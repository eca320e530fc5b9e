//go:build gc && !purego

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
//     a memory access. Instead of a second LFENCE, both TSC readers
//     make a load carry the counter value in its address: it cannot be
//     performed before RDTSC has produced the value, and x86 keeps later
//     loads after it (SDM Vol. 3A, "Memory Ordering in P6 and More Recent
//     Processor Families": "Reads are not reordered with other reads";
//     AMD APM Vol. 2, "Memory Access Ordering": loads do not pass previous
//     loads). The root package's clockNow makes its seq re-check that
//     load (now_amd64.s); readTSC, whose caller
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
