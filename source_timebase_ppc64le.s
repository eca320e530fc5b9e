//go:build gc && !purego

#include "textflag.h"

// The kernel reads the time base with a bare mftb (get_cycles, and the
// vDSO's __arch_get_hw_counter, get_tb). The Power ISA lets mftb execute
// out of order with the loads around it: it is no storage access, so no
// sync or lwsync orders it. Before it, isync: mftb cannot begin until
// every earlier instruction, the loads of the latch bank included, has
// completed. After it, the value feeds the address of a dummy load, and
// that load is made an acquire the way Go's atomic.Load ends (compare,
// branch on the loaded value, isync), so the caller's seq re-check
// cannot be satisfied before the time base was read, whatever fence that
// re-check carries (sync, or lwsync for LoadAcq).

// func readTimeBase() uint64
TEXT ·readTimeBase(SB), NOSPLIT|NOFRAME, $0-8
	ISYNC                // mftb waits until the earlier loads of the latch bank have completed.
	MOVD SPR(268), R3    // mftb: the time base (TBR 268), readable from user mode.
	XOR  R3, R3, R4      // R4 = 0, data-dependent on the time base value.
	ADD  R4, R1, R4      // a valid address (the stack) carrying that dependency.
	MOVD 0(R4), R4       // a load that cannot be performed before mftb.
	CMP  R4, R4, CR7
	BC   4, 30, 1(PC)    // bne- cr7: a branch on the loaded value...
	ISYNC                // ...and isync: every later load, the seq re-check included, waits for the dummy load.
	MOVD R3, ret+0(FP)
	RET
