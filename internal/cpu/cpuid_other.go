//go:build !amd64 || !gc || purego

package cpu

// Supported reports whether this build has the CPUID instruction.
const Supported = false

// CPUID has no instruction to run in this build: every leaf reads 0.
func CPUID(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32) { return 0, 0, 0, 0 }
