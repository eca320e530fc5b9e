//go:build !amd64 || !gc || purego

package testcounter

// ReadTSCP is never called in this build: there is no RDTSCP to run
// (cpu.HasRDTSCP is false where cpu.CPUID reads 0).
func ReadTSCP() uint64 { return 0 }
