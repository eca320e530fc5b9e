//go:build gc && !purego

#include "textflag.h"

// func orderAfter(v uint64)
TEXT ·orderAfter(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ v+0(FP), AX
	ANDQ $0, AX          // AX = 0, data-dependent on v.
	MOVQ 0(SP)(AX*1), AX // a load that cannot be performed before v is known: the caller's later loads are ordered after it.
	RET
