package schedclock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/testenv"
)

// assertClockRateWithin checks that c advances with CLOCK_MONOTONIC_RAW
// to within ppm over 2 s. Each end is bracketed by two reads of the
// reference; the bracket's width is added to the tolerance, so a slow
// or preempted read cannot fail the test (only the counter's rate can).
func assertClockRateWithin(t *testing.T, c *Clock, name string, ppm float64) {
	t.Helper()
	bracket := func() (clock, ref, width int64) {
		lo := rawNow()
		clock = c.nanos()
		hi := rawNow()
		return clock, lo + (hi-lo)/2, hi - lo
	}
	c0, r0, w0 := bracket()
	time.Sleep(2 * time.Second)
	c1, r1, w1 := bracket()
	elapsed := float64(r1 - r0)
	offPPM := (float64(c1-c0) - elapsed) / elapsed * 1e6
	slackPPM := float64(w0+w1) / 2 / elapsed * 1e6
	t.Logf("%s over %v of %s: %+.2f ppm (brackets ±%.2f ppm)", name, time.Duration(r1-r0), rawClockName, offPPM, slackPPM)
	assert.InDelta(t, 0, offPPM, ppm+slackPPM, "%s's Clock disagrees with %s", name, rawClockName)
}

// TestWithMeasuredRateMeasures: withMeasuredRate keeps a stated rate
// that holds, and measures one that does not, or none, against the raw
// clock (200 ms each: real time, so the qualification layer).
func TestWithMeasuredRateMeasures(t *testing.T) {
	testenv.Qualify(t)
	stated := Source{Name: "mono", Read: readMono, Bits: 64, Rate: 1_000_000_000}
	src, err := withMeasuredRate(stated, rateDeviceTree, 0, nil)
	require.NoError(t, err)
	assert.Equal(t, stated.Rate, src.Rate, "a stated rate that holds is kept as it is")

	// A stated rate the counter does not follow (qemu-loongarch64's
	// CPUCFG) is replaced by a measured one.
	stated.Rate = 100_000_000
	src, err = withMeasuredRate(stated, rateCPUCFG, 0, nil)
	require.NoError(t, err)
	assert.InDelta(t, 1e9, float64(src.Rate), 1e9*600e-6)

	// Go's monotonic clock as the counter: 1 GHz against the raw clock,
	// off by no more than the kernel's NTP steering (at most 500 ppm).
	src, err = withMeasuredRate(Source{Name: "mono", Read: readMono, Bits: 64}, rateMeasured, 0, nil)
	require.NoError(t, err)
	assert.InDelta(t, 1e9, float64(src.Rate), 1e9*600e-6)

	_, err = withMeasuredRate(Source{Name: "stuck", Read: func() uint64 { return 7 }, Bits: 64}, rateMeasured, 0, nil)
	assert.ErrorIs(t, err, errUntrusted)
	assert.EqualError(t, err, `schedclock: counter not trusted "stuck": measuring its rate against `+rawClockName+": counter or reference did not advance")
}
