package hwcounter

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestRateOriginNames: each origin's name, as Info prints it; the
// origins of the later counters follow the first ones (none changes its
// number); an origin out of range says its number.
func TestRateOriginNames(t *testing.T) {
	assert.Equal(t, RateRefined+1, RateDeviceTree)
	for o, name := range map[RateOrigin]string{
		RateDeclared: "declared", RateCPUID: "cpuid", RateHypervisor: "hypervisor leaf",
		RateMeasured: "measured", RateCNTFRQ: "cntfrq", RateRefined: "refined",
		RateDeviceTree: "device tree", RateCPUInfo: "cpuinfo", RateArchitected: "architected", RateCPUCFG: "cpucfg",
		RateNanoseconds: "nanoseconds by construction", RateOrigin(99): "rateOrigin(99)",
	} {
		assert.Equal(t, name, o.String())
	}
}

// TestErrUntrustedIsUnsupported: a counter that cannot be trusted is one
// that is not supported here, to errors.Is.
func TestErrUntrustedIsUnsupported(t *testing.T) {
	assert.ErrorIs(t, ErrUntrusted, ErrUnsupported)
	assert.NotErrorIs(t, ErrUnsupported, ErrUntrusted)
	assert.Equal(t, "schedclock: counter not trusted", ErrUntrusted.Error())
}
