//go:build gc && !purego

#include "textflag.h"

// These two readers exist only for the root package's ordering tests;
// the clock never reads CNTVCT_EL0 through them.

// func ReadUnfenced() uint64
TEXT ·ReadUnfenced(SB), NOSPLIT|NOFRAME, $0-8
	MRS  CNTVCT_EL0, R0 // deliberately unfenced: no ISB before, no ordering after.
	MOVD R0, ret+0(FP)
	RET

// func ReadSerialized() uint64
TEXT ·ReadSerialized(SB), NOSPLIT|NOFRAME, $0-8
	ISB  $15 // the counter read waits for every earlier instruction.
	MRS  CNTVCT_EL0, R0
	EOR  R0, R0, R1  // R1 = 0, data-dependent on the counter value.
	ADD  R1, RSP, R1 // a valid address carrying that dependency.
	LDAR (R1), R1    // every later load waits for the counter read.
	ISB  $15         // every later instruction waits for the counter read.
	MOVD R0, ret+0(FP)
	RET
