//go:build gc && !purego

package schedclock

// readTSCP reads the TSC with RDTSCP, ordered like readTSC: for
// BenchmarkRDTSCP only. Call it only where rdtscpSupported.
func readTSCP() uint64

// rdtscpSupported reports CPUID 0x80000001 EDX bit 27 (RDTSCP).
func rdtscpSupported() bool {
	if maxExt, _, _, _ := cpuidAsm(leafMaxExtended, 0); maxExt < 0x80000001 {
		return false
	}
	_, _, _, edx := cpuidAsm(0x80000001, 0)
	return edx&(1<<27) != 0
}
