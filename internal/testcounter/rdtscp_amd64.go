//go:build gc && !purego

package testcounter

// ReadTSCP reads the TSC with RDTSCP, followed by the same dependent load
// as the clock's LFENCE; RDTSC: for BenchmarkRDTSCP, which compares the
// two. Call it only where cpu.HasRDTSCP(cpu.CPUID).
func ReadTSCP() uint64
