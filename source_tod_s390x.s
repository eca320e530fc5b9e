//go:build gc && !purego

#include "textflag.h"

// STCKF (STORE CLOCK FAST) stores the TOD clock without the uniqueness
// and serialisation work of STCK; the kernel's get_tod_clock_fast uses it
// bare, and its vDSO reads the clock (STCKE) with no barrier either,
// relying on z/Architecture's strong ordering of storage accesses. The
// fetch of the clock itself is no storage access, so that ordering does
// not cover it; each side gets a serialisation, BCR 14,0 (Go's SYNC, the
// kernel's mb()): every conceptually earlier storage access, the loads of
// the latch bank included, completes before STCKF, and STCKF's store of
// the clock value completes before every later access, the seq re-check
// included.

// func readTOD() uint64
TEXT ·readTOD(SB), NOSPLIT|NOFRAME, $0-8
	SYNC            // STCKF waits until the earlier loads of the latch bank have completed.
	STCKF ret+0(FP)
	SYNC            // every later load, the seq re-check included, waits for the clock value's store.
	RET
