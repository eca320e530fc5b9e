package schedclock

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestRateOriginNames: each origin's name, as Info prints it; the
// origins of the later counters follow the first ones (none changes its
// number); an origin out of range says its number.
func TestRateOriginNames(t *testing.T) {
	assert.Equal(t, rateRefined+1, rateDeviceTree)
	for o, name := range map[rateOrigin]string{
		rateDeclared: "declared", rateCPUID: "cpuid", rateHypervisor: "hypervisor leaf",
		rateMeasured: "measured", rateCNTFRQ: "cntfrq", rateRefined: "refined",
		rateDeviceTree: "device tree", rateCPUInfo: "cpuinfo", rateArchitected: "architected", rateCPUCFG: "cpucfg",
		rateNanoseconds: "nanoseconds by construction", rateOrigin(99): "rateOrigin(99)",
	} {
		assert.Equal(t, name, o.String())
	}
}

// TestErrUntrustedIsUnsupported: a counter that cannot be trusted is one
// that is not supported here, to errors.Is.
func TestErrUntrustedIsUnsupported(t *testing.T) {
	assert.ErrorIs(t, errUntrusted, ErrUnsupported)
	assert.NotErrorIs(t, ErrUnsupported, errUntrusted)
	assert.Equal(t, "schedclock: counter not trusted", errUntrusted.Error())
}
