//go:build gc && !purego

#include "textflag.h"

// These two readers exist only for the root package's ordering tests;
// the clock never reads the TSC through them.

// func ReadUnfenced() uint64
TEXT ·ReadUnfenced(SB), NOSPLIT|NOFRAME, $0-8
	RDTSC // deliberately unfenced: the read may be performed before earlier loads complete, which the tests must detect.
	SHLQ $32, DX
	ORQ  DX, AX
	MOVQ AX, ret+0(FP)
	RET

// func ReadSerialized() uint64
TEXT ·ReadSerialized(SB), NOSPLIT|NOFRAME, $0-8
	LFENCE // RDTSC waits until every earlier instruction, loads included, has completed.
	RDTSC
	LFENCE // every later instruction, loads included, waits until RDTSC has read the counter (Intel SDM Vol. 2B, RDTSC).
	SHLQ   $32, DX
	ORQ    DX, AX
	MOVQ   AX, ret+0(FP)
	RET
