package schedclock

// kernelClocksHere says the kernel's monotonic and boot clocks are
// Linux's, which its tracers stamp with.
func kernelClocksHere() bool { return true }

// kernelUnmapped is Info.KernelTime before any KernelTime.
const kernelUnmapped = "not mapped yet (at the first KernelTime)"
