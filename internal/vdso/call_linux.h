// What the vDSO callers of call_linux_amd64.s and call_linux_arm64.s
// share: the frame they reserve for the C function and the pattern the
// measuring variant fills it with. The instructions around them are each
// architecture's own (its registers, its ABI's stack rules, arm64's g
// slot), so each file keeps its own; see the comment at the top of each.

// The stack reserved for the C function: reservedFrame in
// call_linux_amd64.go, where the choice is explained. The TEXT lines
// spell it out ($5120): go vet's asmdecl reads them before macros expand.
#define VDSO_FRAME 5120

// The pattern callClockGettimeMeasured fills the C stack with, to find
// afterwards the lowest word the C function changed.
#define STACK_PATTERN $0x5a5a5a5a5a5a5a5a
