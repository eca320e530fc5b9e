//go:build gc && !purego

package schedclock

import (
	"testing"

	"github.com/schedclock/schedclock/internal/cpu"
	"github.com/schedclock/schedclock/internal/testcounter"
)

// BenchmarkRDTSCP compares the two ordered TSC reads: LFENCE; RDTSC (what
// the clock uses) and RDTSCP, each followed by the same dependent load.
// Where RDTSCP is faster, the clock's reader should use it; on
// a CPU without it the RDTSCP half cannot run and says so.
func BenchmarkRDTSCP(b *testing.B) {
	b.Run("lfence-rdtsc", func(b *testing.B) {
		var s uint64
		for b.Loop() {
			s += readTSC()
		}
		sink += s
	})
	b.Run("rdtscp", func(b *testing.B) {
		if !cpu.HasRDTSCP(cpu.CPUID) {
			b.Skip("this CPU has no RDTSCP (CPUID 0x80000001 EDX bit 27 clear)")
		}
		var s uint64
		for b.Loop() {
			s += testcounter.ReadTSCP()
		}
		sink += s
	})
}

var sink uint64

func TestRDTSCPWhereSupported(t *testing.T) {
	if !cpu.HasRDTSCP(cpu.CPUID) {
		t.Log("this CPU has no RDTSCP: nothing to compare")
		return
	}
	a, b := testcounter.ReadTSCP(), readTSC()
	if b < a {
		t.Fatalf("RDTSCP read %d, a later LFENCE;RDTSC %d: not the same counter?", a, b)
	}
}
