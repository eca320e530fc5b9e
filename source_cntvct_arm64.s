//go:build gc && !purego

#include "textflag.h"

// readCNTVCT must read the counter after the caller's loads of the latch
// bank (ISB) and before the caller's seq re-check. That re-check is an
// acquire load (LDAR), which is not ordered after an earlier plain load or
// an MRS; so the counter value feeds the address of a dummy acquire load,
// which cannot execute before the MRS completes, and every later load is
// ordered after that acquire (the kernel's arch_counter_enforce_ordering,
// with LDAR in place of LDR).

// func readCNTVCT() uint64
TEXT ·readCNTVCT(SB), NOSPLIT|NOFRAME, $0-8
	ISB  $15 // the counter read cannot be performed before the earlier loads of the latch bank.
	MRS  CNTVCT_EL0, R0
	EOR  R0, R0, R1  // R1 = 0, data-dependent on the counter value.
	ADD  R1, RSP, R1 // a valid address (the stack) carrying that dependency.
	LDAR (R1), R1    // orders every later load, the seq re-check included, after the counter read.
	MOVD R0, ret+0(FP)
	RET

// func readCNTFRQ() uint64
TEXT ·readCNTFRQ(SB), NOSPLIT|NOFRAME, $0-8
	MRS  CNTFRQ_EL0, R0
	MOVD R0, ret+0(FP)
	RET
