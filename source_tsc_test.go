package schedclock

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/cpu"
)

// tscLeaves replays the CPUID leaves of an EPYC KVM guest with an
// invariant TSC and the hypervisor timing leaf (2994374 kHz), with some
// leaves replaced; internal/cpu tests the CPUs one by one.
func tscLeaves(changes map[[2]uint32][4]uint32) cpu.Func {
	leaves := map[[2]uint32][4]uint32{
		{0x0, 0}:        {0x10, 0x68747541, 0x444d4163, 0x69746e65},
		{0x1, 0}:        {0x00a00f11, 0x00020800, 0xfef83203, 0x178bfbff},
		{0x40000000, 0}: {0x40000010, 0x4b4d564b, 0x564b4d56, 0x0000004d},
		{0x40000010, 0}: {2_994_374, 1_000_000, 0, 0},
		{0x80000000, 0}: {0x80000021, 0, 0, 0},
		{0x80000007, 0}: {0, 0, 0, 0x100},
	}
	for k, v := range changes {
		leaves[k] = v
	}
	return func(eax, ecx uint32) (a, b, c, d uint32) {
		r := leaves[[2]uint32{eax, ecx}]
		return r[0], r[1], r[2], r[3]
	}
}

// TestTSCRateWithTheKernel checks what tscRate adds to CPUID's answer:
// the kernel's clocksource, and the sentinel each refusal wraps.
func TestTSCRateWithTheKernel(t *testing.T) {
	tests := []struct {
		name        string
		changes     map[[2]uint32][4]uint32
		clocksource string
		wantOrigin  rateOrigin
		wantErr     error
		wantMsg     string
	}{
		{name: "kernel uses the TSC", clocksource: "tsc", wantOrigin: rateHypervisor},
		{name: "clocksource with its newline", clocksource: "tsc\n", wantOrigin: rateHypervisor},
		{name: "no sysfs: CPUID only", clocksource: "", wantOrigin: rateHypervisor},
		{name: "no rate leaf: measured", clocksource: "tsc", wantOrigin: rateMeasured,
			changes: map[[2]uint32][4]uint32{{0x40000010, 0}: {}}},
		{name: "kernel uses kvm-clock", clocksource: "kvm-clock\n",
			wantErr: errUntrusted, wantMsg: `schedclock: counter not trusted "tsc": kernel clocksource is kvm-clock, not tsc`},
		{name: "kernel demoted the TSC to hpet", clocksource: "hpet",
			wantErr: errUntrusted, wantMsg: `schedclock: counter not trusted "tsc": kernel clocksource is hpet, not tsc`},
		{name: "not invariant, whatever the kernel says", clocksource: "hpet",
			changes: map[[2]uint32][4]uint32{{0x80000007, 0}: {}},
			wantErr: errUntrusted, wantMsg: `schedclock: counter not trusted "tsc": no invariant TSC (CPUID 0x80000007 EDX bit 8 clear)`},
		{name: "no TSC at all", clocksource: "tsc",
			changes: map[[2]uint32][4]uint32{{0x1, 0}: {0x00a00f11, 0x00020800, 0xfef83203, 0x178bfbef}},
			wantErr: ErrUnsupported, wantMsg: `schedclock: counter not supported here "tsc": no TSC (CPUID 1 EDX bit 4 clear)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rate, origin, errPPM, err := tscRate(tscLeaves(tt.changes), tt.clocksource)
			if tt.wantErr != nil {
				require.Error(t, err)
				assert.ErrorIs(t, err, tt.wantErr)
				assert.EqualError(t, err, tt.wantMsg)
				assert.Zero(t, rate)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantOrigin, origin)
			if origin == rateMeasured {
				assert.Zero(t, rate)
				return
			}
			assert.Equal(t, uint64(2_994_374_000), rate)
			assert.InDelta(t, 0.5e6/2_994_374, errPPM, 1e-9)
		})
	}
}
