package schedclock

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStableCounter(t *testing.T) {
	testTimerCounter(t, timerCounter{
		name: "stablecounter", arch: "loong64", supported: stableCounterSupported,
		construct: stableCounterSource, probe: probeStableCounter,
		origins: []rateOrigin{rateCPUCFG},
	})
}

// TestCPUCFGHere logs the words the kernel's calc_const_freq reads (the
// fuzz target's seed is qemu-loongarch64's) and checks that they give
// the rate the probe states (StableCounter's may be measured: under
// qemu-user the counter does not follow it).
func TestCPUCFGHere(t *testing.T) {
	if !stableCounterSupported {
		assert.Zero(t, cpucfg(4))
		t.Skip("no CPUCFG in this build: ", noAsmReason("loong64"))
	}
	t.Logf("CPUCFG 2 %#x, 4 %d, 5 %#x on %s", cpucfg(2), cpucfg(4), cpucfg(5), runtime.GOARCH)
	rate, err := stableCounterRate(cpucfg)
	require.NoError(t, err)
	src, origin, _, err := probeStableCounter()
	require.NoError(t, err)
	assert.Equal(t, rate, src.Rate)
	assert.Equal(t, rateCPUCFG, origin)
}

func TestStableCounterRate(t *testing.T) {
	words := func(cfg2, cfg4, cfg5 uint32) func(uint32) uint32 {
		return func(leaf uint32) uint32 { return map[uint32]uint32{2: cfg2, 4: cfg4, 5: cfg5}[leaf] }
	}
	rate, err := stableCounterRate(words(1<<14, 100_000_000, 1<<16|1))
	require.NoError(t, err)
	assert.Equal(t, uint64(100_000_000), rate)

	for _, tt := range []struct {
		name             string
		cfg2, cfg4, cfg5 uint32
		msg              string
	}{
		{"no constant-frequency timer", 0, 100_000_000, 1<<16 | 1,
			`schedclock: counter not trusted "stablecounter": timebase: no counter rate: CPUCFG 2 (0x0) has no constant-frequency timer (LLFTP, bit 14)`},
		{"no base clock", 1 << 14, 0, 1<<16 | 1,
			`schedclock: counter not trusted "stablecounter": timebase: no counter rate: CPUCFG gives base 0 Hz, multiplier 1, divisor 1 (firmware left one at 0)`},
		{"no divisor", 1 << 14, 100_000_000, 1,
			`schedclock: counter not trusted "stablecounter": timebase: no counter rate: CPUCFG gives base 100000000 Hz, multiplier 1, divisor 0 (firmware left one at 0)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rate, err := stableCounterRate(words(tt.cfg2, tt.cfg4, tt.cfg5))
			assert.ErrorIs(t, err, errUntrusted)
			assert.EqualError(t, err, tt.msg)
			assert.Zero(t, rate)
		})
	}
}
