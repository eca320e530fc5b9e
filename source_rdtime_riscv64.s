//go:build gc && !purego

#include "textflag.h"

// The kernel reads the time CSR with a bare csrr (get_cycles, and the
// vDSO's __arch_get_hw_counter), and its vDSO's seq re-check (smp_rmb,
// fence r,r) does not order it: RVWMO orders memory accesses, and the
// unprivileged ISA (Zicsr, "CSR Access Ordering") says CSR accesses are
// not ordered with explicit memory accesses unless a dependency or a
// FENCE orders them, a CSR read counting as device input (I) to FENCE.
// Go's FENCE is fence iorw,iorw. The caller's seq re-check is an
// LR.D.aq, which orders only what follows it; so the read needs a fence
// on each side, which no dependency can replace before it (RDTIME takes
// no operand a load could feed).

// func readRDTIME() uint64
TEXT ·readRDTIME(SB), NOSPLIT|NOFRAME, $0-8
	FENCE      // the time CSR read (device input) waits for the earlier loads of the latch bank.
	RDTIME X10
	FENCE      // every later load, the seq re-check included, waits for the time CSR read.
	MOV    X10, ret+0(FP)
	RET
