//go:build gc && !purego

#include "textflag.h"

// The kernel reads the stable counter with a bare rdtime.d (get_cycles,
// and the vDSO's __arch_get_hw_counter). LoongArch lets loads pass loads,
// and the caller's seq re-check is a plain load followed by DBAR 0x14,
// which orders only what follows it. Before the read, DBAR 0, the full
// barrier: the manual defines it on memory accesses only, and no barrier
// is documented to order RDTIME.D; this is the strongest there is, as ISB
// is on arm64. After it, the value feeds the address of a dummy load,
// which cannot execute before RDTIME.D's result, and DBAR 0 orders that
// load before every later one (arm64's arch_counter_enforce_ordering).

// func readStableCounter() uint64
TEXT ·readStableCounter(SB), NOSPLIT|NOFRAME, $0-8
	DBAR    $0         // the earlier loads of the latch bank complete before the counter read.
	RDTIMED R0, R4     // R4 = the stable counter (its counter ID to R0, discarded).
	XOR     R4, R4, R5 // R5 = 0, data-dependent on the counter value.
	ADDV    R5, R3, R5 // a valid address (the stack) carrying that dependency.
	MOVV    0(R5), R5  // a load that cannot be performed before RDTIME.D.
	DBAR    $0         // every later load, the seq re-check included, waits for the dummy load.
	MOVV    R4, ret+0(FP)
	RET

// func readCPUCFG(leaf uint32) uint32
TEXT ·readCPUCFG(SB), NOSPLIT|NOFRAME, $0-12
	MOVWU  leaf+0(FP), R5
	CPUCFG R5, R4
	MOVW   R4, ret+8(FP)
	RET
