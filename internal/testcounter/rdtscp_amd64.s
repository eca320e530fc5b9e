//go:build gc && !purego

#include "textflag.h"

// ReadTSCP exists only for the benchmark that compares it with the clock's readTSC
// (BenchmarkRDTSCP); the clock reads the TSC with LFENCE; RDTSC.

// func ReadTSCP() uint64
TEXT ·ReadTSCP(SB), NOSPLIT|NOFRAME, $0-8
	RDTSCP // waits until all earlier instructions have executed and earlier loads are globally visible (Intel SDM Vol. 2B, RDTSCP); ECX gets IA32_TSC_AUX.
	SHLQ   $32, DX
	ORQ    DX, AX
	MOVQ   AX, CX
	ANDQ   $0, CX          // CX = 0, data-dependent on the counter value.
	MOVQ   0(SP)(CX*1), CX // later loads wait for the counter read, as after readTSC.
	MOVQ   AX, ret+0(FP)
	RET
