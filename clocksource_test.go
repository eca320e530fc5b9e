package schedclock

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRescaleFracNeverLosesTime(t *testing.T) {
	for _, tc := range []struct {
		ns       int64
		frac     uint64
		from, to uint32
		wantNs   int64
		wantFrac uint64
	}{
		{5, 1, 10, 21, 5, 1 << 11},          // finer: exact
		{5, 1<<21 - 1, 21, 10, 6, 0},        // coarser, rounds up into the next ns
		{5, 1<<20 + 1, 21, 10, 5, 1<<9 + 1}, // coarser, rounds up within the ns
		{5, 1 << 20, 21, 10, 5, 1 << 9},     // coarser, exact
		{-3, 0, 21, 2, -3, 0},               // nothing to carry
		{7, 3, 2, 2, 7, 3},                  // same shift
		{7, 1<<32 - 1, 32, 1, 8, 0},         // the widest shift
	} {
		ns, frac := rescaleFrac(tc.ns, tc.frac, tc.from, tc.to)
		assert.Equal(t, tc.wantNs, ns, "%+v", tc)
		assert.Equal(t, tc.wantFrac, frac, "%+v", tc)
		assert.Less(t, frac, uint64(1)<<tc.to, "remainder out of range: %+v", tc)
		// The value never moves backwards: ns + frac/2^to >= ns0 + frac0/2^from.
		assert.GreaterOrEqual(t, float64(ns)+float64(frac)/float64(uint64(1)<<tc.to),
			float64(tc.ns)+float64(tc.frac)/float64(uint64(1)<<tc.from), "%+v", tc)
	}
}

func TestRateOriginNames(t *testing.T) {
	for o, name := range map[RateOrigin]string{
		RateDeclared: "declared", RateCPUID: "cpuid", RateHypervisor: "hypervisor leaf",
		RateMeasured: "measured", RateCNTFRQ: "cntfrq", RateRefined: "refined", RateOrigin(99): "RateOrigin(99)",
	} {
		assert.Equal(t, name, o.String())
	}
}

// TestMultShiftBounds checks, over the whole range of rates, that mult
// and shift stay within what the latch packs (mult 32 bits, shift at most
// maxShift) and that absurd rates are refused rather than mis-scaled.
func TestMultShiftBounds(t *testing.T) {
	for rate := uint64(1); rate < 1<<62; rate = rate*3/2 + 1 {
		mult, shift := clocksMultShift(rate, 1e9, maxConversionSeconds)
		if mult == 0 {
			assert.Greater(t, rate, uint64(1e15), "rate %d refused", rate)
			continue
		}
		assert.LessOrEqual(t, shift, uint32(maxShift), "rate %d", rate)
		// mult/2^shift is 1e9/rate within the rounding of mult.
		got := float64(mult) / float64(uint64(1)<<shift)
		want := 1e9 / float64(rate)
		assert.InEpsilon(t, want, got, 0.5/float64(mult)+1e-12, "rate %d: mult %d shift %d", rate, mult, shift)
	}
}
