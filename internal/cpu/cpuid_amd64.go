//go:build gc && !purego

package cpu

// Supported reports whether this build has the CPUID instruction.
const Supported = true

// CPUID executes CPUID with the given EAX (leaf) and ECX (sub-leaf) on
// this CPU. Under a hypervisor it is a VM exit (microseconds): never on
// a read path.
func CPUID(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
