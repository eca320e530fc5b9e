//go:build gc && !purego

#include "textflag.h"

// func orderAfter(v uint64)
TEXT ·orderAfter(SB), NOSPLIT|NOFRAME, $0-8
	MOVD v+0(FP), R0
	EOR  R0, R0, R1  // R1 = 0, data-dependent on v.
	ADD  R1, RSP, R1 // a valid address carrying that dependency.
	LDAR (R1), R1    // orders every later load of the caller after v is known.
	RET
