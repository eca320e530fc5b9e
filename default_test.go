package schedclock

import (
	"errors"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hardwareExpected reports whether this machine offers a hardware counter
// the default clock should end up on.
func hardwareExpected(t *testing.T) (Source, bool) {
	hw, _, _, err := probeHardware()
	if err != nil {
		assert.True(t, runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" || errorsIsAny(err),
			"unexpected probe error: %v", err)
		return Source{}, false
	}
	return hw, true
}

func errorsIsAny(err error) bool {
	return errors.Is(err, ErrUnsupported) || errors.Is(err, ErrUntrusted)
}

// waitInfo polls the default clock's Info until cond holds or d passes.
func waitInfo(d time.Duration, cond func(Info) bool) Info {
	deadline := time.Now().Add(d)
	for {
		in := Default().Info()
		if cond(in) || time.Now().After(deadline) {
			return in
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestDefaultClockAdoptsAndRefinesTheHardwareCounter(t *testing.T) {
	hw, ok := hardwareExpected(t)
	if !ok {
		in := Default().Info()
		assert.Equal(t, "portable", in.Source)
		assert.NotEmpty(t, in.Rejected, "a rejected counter must say why")
		return
	}
	in := waitInfo(time.Second, func(in Info) bool { return in.Source == hw.Name })
	require.Equal(t, hw.Name, in.Source, "default clock never adopted %s: %+v", hw.Name, in)
	assert.Empty(t, in.Rejected)
	assert.Contains(t, []RateOrigin{RateCPUID, RateHypervisor, RateMeasured, RateCNTFRQ, RateRefined}, in.RateOrigin)
	assert.LessOrEqual(t, in.RateErrorPPM, 50.0, "first hardware rate")

	// Within two seconds of start the refinement is at 1 ppm or better.
	in = waitInfo(2*time.Second-time.Duration(rawNow()-int64(processStart)), func(in Info) bool {
		return in.RateOrigin == RateRefined && in.RateErrorPPM <= 1
	})
	assert.Equal(t, RateRefined, in.RateOrigin)
	assert.LessOrEqual(t, in.RateErrorPPM, 1.0, "%+v", in)

	// Where the TSC's rate had to be measured, TSC() now takes the
	// default clock's refined rate instead of measuring again.
	if hw.Name == "tsc" && hw.Rate == 0 {
		src, err := TSC()
		require.NoError(t, err)
		assert.Equal(t, Default().Info().Rate, src.Rate)
	}
}

// TestDefaultClockTracksTheRawClock measures the default clock's rate
// against CLOCK_MONOTONIC_RAW over a second, after the first refinements.
func TestDefaultClockTracksTheRawClock(t *testing.T) {
	if _, ok := hardwareExpected(t); !ok {
		return
	}
	waitInfo(2*time.Second, func(in Info) bool { return in.RateOrigin == RateRefined && in.RateErrorPPM <= 1 })
	pair := func() (clock, raw, best int64) {
		best = int64(math.MaxInt64)
		for i := 0; i < 50; i++ {
			a := Now()
			r := rawNow()
			b := Now()
			if b-a < best {
				best, clock, raw = b-a, a+(b-a)/2, r
			}
		}
		return clock, raw, best
	}
	c0, r0, w0 := pair()
	time.Sleep(time.Second)
	c1, r1, w1 := pair()
	ppm := (float64(c1-c0) - float64(r1-r0)) / float64(r1-r0) * 1e6
	// 1 ppm for the rate and 1 for the reference, plus the pairing's own
	// uncertainty: the bracket widths at each end (tens of ns natively) and
	// the clock's observable step (under qemu the emulated counter moves in
	// steps of microseconds).
	tolerance := 2 + float64(w0+w1+2*observableStep())/float64(r1-r0)*1e6
	assert.InDelta(t, 0, ppm, tolerance, "clock advanced %d ns while the raw clock advanced %d ns (brackets %d and %d ns)", c1-c0, r1-r0, w0, w1)
}

// TestNowPathsAgree runs the assembly reader (amd64) and the generic Go
// reader over the same clock, interleaved: they must agree, and time must
// never go backwards from one to the other.
func TestNowPathsAgree(t *testing.T) {
	hw, ok := hardwareExpected(t)
	if !ok {
		return
	}
	if hw.Rate == 0 {
		hz, _, err := measureRate(hw.Read, 20*time.Millisecond)
		require.NoError(t, err)
		hw.Rate = uint64(hz)
	}
	c, err := New(hw)
	require.NoError(t, err)
	defer c.Close()
	last := c.Now()
	for i := 0; i < 100000; i++ {
		var now int64
		if i%2 == 0 {
			now = c.Now()
		} else {
			now = c.now()
		}
		require.GreaterOrEqual(t, now, last, "iteration %d", i)
		last = now
	}

	// Counter values the fast paths refuse: below the epoch (clamped to
	// it), and far enough ahead that delta*mult overflows 64 bits.
	c.mu.Lock()
	ln := c.cur
	ln.epochCyc = hw.Read() + uint64(hw.Rate)*1000
	ln.epochNs = 1234
	c.publishLocked(ln)
	c.mu.Unlock()
	assert.Equal(t, int64(1234), c.Now())
	assert.Equal(t, int64(1234), c.now())

	c.mu.Lock()
	ln.epochCyc = hw.Read() - ln.conv.overflowFrom()*3
	c.publishLocked(ln)
	c.mu.Unlock()
	before, _ := ln.at(hw.Read())
	got, gotGeneric := c.Now(), c.now()
	after, _ := ln.at(hw.Read())
	assert.GreaterOrEqual(t, got, before)
	assert.GreaterOrEqual(t, gotGeneric, got)
	assert.GreaterOrEqual(t, after, gotGeneric)
	assert.Greater(t, before, int64(time.Hour), "the 128-bit path must be taken")
}

// observableStep returns the largest of several first steps of the
// default clock: how far apart two distinct readings can be.
func observableStep() int64 {
	var step int64
	for i := 0; i < 20; i++ {
		a := Now()
		b := Now()
		for b == a {
			b = Now()
		}
		step = max(step, b-a)
	}
	return step
}

// TestCalibrationStopsWithClose checks that Close ends the calibration
// goroutine at once instead of leaving it asleep until its next step
// (100 ms after the start, the first time; up to 32 s later on).
func TestCalibrationStopsWithClose(t *testing.T) {
	for _, rate := range []uint64{0, 1e9} {
		f := &FakeCounter{}
		c, err := New(f.Source("fake", 64, 1e9))
		require.NoError(t, err)
		hw := f.Source("fake", 64, rate)
		done := make(chan struct{})
		go func() {
			c.calibrate(hw, samplePoint(hw.Read))
			close(done)
		}()
		time.Sleep(5 * time.Millisecond)
		require.NoError(t, c.Close())
		select {
		case <-done:
		case <-time.After(60 * time.Millisecond):
			t.Fatalf("calibration (rate %d) still running 60 ms after Close", rate)
		}
	}
}

// TestCalibrationYieldsToARegisteredSource checks that the background
// calibration never switches away from a source a caller registered.
func TestCalibrationYieldsToARegisteredSource(t *testing.T) {
	base := time.Now()
	hw := Source{Name: "hw", Bits: 64, Rate: 1e9, Read: func() uint64 { return uint64(time.Since(base)) }}
	c, err := New(Portable())
	require.NoError(t, err)
	defer c.Close()
	start := samplePoint(hw.Read)
	time.Sleep(5 * time.Millisecond)
	own := &FakeCounter{}
	require.NoError(t, c.Register(own.Source("own", 64, 2e9)))
	assert.False(t, c.adoptRate(hw, start, RateRefined), "calibration must end")
	assert.Equal(t, "own", c.Info().Source)

	// While the clock is still on the portable source, it adopts hw.
	d, err := New(Portable())
	require.NoError(t, err)
	defer d.Close()
	assert.True(t, d.adoptRate(hw, start, RateMeasured))
	assert.Equal(t, "hw", d.Info().Source)
}

// TestRejectedSurvivesARegister checks that Info().Rejected keeps saying
// why the hardware counter is not used when a caller registers a source
// of their own, and is cleared only when the hardware counter is adopted.
func TestRejectedSurvivesARegister(t *testing.T) {
	c, err := New(Portable())
	require.NoError(t, err)
	defer c.Close()
	c.mu.Lock()
	c.rejected = "tsc: kernel clocksource is kvm-clock, not tsc"
	c.mu.Unlock()
	own := &FakeCounter{}
	require.NoError(t, c.Register(own.Source("own", 64, 2e9)))
	assert.Equal(t, "tsc: kernel clocksource is kvm-clock, not tsc", c.Info().Rejected)

	d, err := New(Portable())
	require.NoError(t, err)
	defer d.Close()
	d.mu.Lock()
	d.rejected = "hw: rate being measured"
	d.mu.Unlock()
	base := time.Now()
	hw := Source{Name: "hw", Bits: 64, Rate: 1e9, Read: func() uint64 { return uint64(time.Since(base)) }}
	start := samplePoint(hw.Read)
	time.Sleep(5 * time.Millisecond)
	require.True(t, d.adoptRate(hw, start, RateMeasured))
	assert.Equal(t, "hw", d.Info().Source)
	assert.Empty(t, d.Info().Rejected)
}

// TestCallerRegisterEndsCalibration checks that any Register by a caller,
// even of the portable source the default clock starts on, ends the
// background calibration: it must not switch the clock back to the
// counter it was measuring.
func TestCallerRegisterEndsCalibration(t *testing.T) {
	base := time.Now()
	hw := Source{Name: "hw", Bits: 64, Rate: 1e9, Read: func() uint64 { return uint64(time.Since(base)) }}
	c, err := New(Portable())
	require.NoError(t, err)
	defer c.Close()
	start := samplePoint(hw.Read)
	time.Sleep(5 * time.Millisecond)
	require.NoError(t, c.Register(Portable()))
	assert.False(t, c.adoptRate(hw, start, RateRefined), "calibration must end")
	assert.Equal(t, "portable", c.Info().Source)
}
