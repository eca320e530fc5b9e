package schedclock

import (
	"math"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMultShiftPrecision checks, over the whole range of rates from 1 Hz
// to 10 GHz and beyond, that mult fits 32 bits and shift the latch's
// packing, that the conversion's own rounding is within 0.01 ppm (it is
// below 0.002 ppm), and that a 64-bit counter's refresh period is at
// least a second; absurd rates are refused rather than mis-scaled.
func TestMultShiftPrecision(t *testing.T) {
	worst := 0.0
	check := func(rate float64) {
		mult, shift, ok := multShift(rate, ^uint64(0))
		if rate > 1e15 {
			if ok {
				assert.Greater(t, float64(^uint64(0)/uint64(mult)), 2*rate*0.999, "rate %.0f: overflow horizon", rate)
			}
			return
		}
		require.True(t, ok, "rate %.0f refused", rate)
		assert.Less(t, shift, uint32(64))
		conv := conversion{mult: mult, shift: shift, mask: ^uint64(0)}
		if rate <= 10e9 {
			errPPM := math.Abs(conv.errorPPM(rate))
			worst = max(worst, errPPM)
			assert.LessOrEqual(t, errPPM, 0.002, "rate %.3f Hz: mult %d shift %d", rate, mult, shift)
		}
		assert.GreaterOrEqual(t, conv.refreshPeriod(), minOverflowHorizon/2-time.Nanosecond, "rate %.0f: mult %d shift %d", rate, mult, shift)
	}
	for rate := 1.0; rate < 1<<62; rate = math.Floor(rate*1.37) + 1 {
		check(rate)
	}
	for _, rate := range []float64{1, 250, 32768, 19.2e6, 24e6, 62.5e6, 1e9, 2.3e9, 2.6e9, 3e9, 3.9e9, 10e9, 2399999999.73, 1.5} {
		check(rate)
	}
	t.Logf("worst rounding from 1 Hz to 10 GHz: %.5f ppm", worst)
	_, _, ok := multShift(float64(^uint64(0)), ^uint64(0))
	assert.False(t, ok, "2^64 Hz")
	_, _, ok = multShift(0.5, ^uint64(0))
	assert.False(t, ok, "0.5 Hz")
}

// TestMultShiftIsExactForWholeRates checks the 128-bit rounding against
// big-integer arithmetic.
func TestMultShiftIsExactForWholeRates(t *testing.T) {
	for _, rate := range []uint64{1, 3, 7, 1000, 32768, 24_000_000, 999_999_937, 1e9, 3e9, 10e9, 123_456_789_012} {
		mult, shift, ok := multShift(float64(rate), ^uint64(0))
		require.True(t, ok)
		want := new(big.Int).Lsh(big.NewInt(1e9), uint(shift))
		want.Add(want, new(big.Int).SetUint64(rate/2))
		want.Quo(want, new(big.Int).SetUint64(rate))
		assert.Equal(t, want.Uint64(), uint64(mult), "rate %d shift %d", rate, shift)
		// And it is the largest shift whose mult fits 32 bits, or the
		// overflow horizon stopped it.
		next := new(big.Int).Lsh(big.NewInt(1e9), uint(shift+1))
		next.Add(next, new(big.Int).SetUint64(rate/2))
		next.Quo(next, new(big.Int).SetUint64(rate))
		assert.True(t, !next.IsUint64() || next.Uint64() > 1<<32-1 || float64(^uint64(0)/next.Uint64()) < minOverflowHorizon.Seconds()*float64(rate),
			"rate %d: shift %d is not the largest", rate, shift)
	}
}
