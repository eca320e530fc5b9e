//go:build !linux

package schedclock

// kernelClocksHere: KernelTime maps onto Linux's trace clocks only.
func kernelClocksHere() bool { return false }

// kernelUnmapped is Info.KernelTime: KernelTime maps nothing here.
const kernelUnmapped = "not on this system: KernelTime maps onto Linux's clocks"
