package adjtimex

import (
	"math"
	"math/big"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBoundNsIsMaxerrorAndTheKernelsGrowth: maxerror, one 500 µs step,
// and 500 ppm of the age (stretched by the margin), rounded up; a
// negative age counts as its magnitude; the kernel's clamp applies.
func TestBoundNsIsMaxerrorAndTheKernelsGrowth(t *testing.T) {
	rate := RatePPB(1000)
	assert.Equal(t, int64(500_500), rate, "500 ppm, and 1000 ppm of it")
	assert.Equal(t, int64(500_000), RatePPB(0))
	r := Reading{MaxErrorUs: 1000}
	assert.Equal(t, int64(1_500_000), r.BoundNs(0, rate))
	assert.Equal(t, int64(1_500_000+500_500), r.BoundNs(1e9, rate), "a second on")
	assert.Equal(t, int64(1_500_000+500_500), r.BoundNs(-1e9, rate), "a second before")
	assert.Equal(t, int64(1_500_001), r.BoundNs(1, rate), "rounded up")
	assert.Equal(t, int64(1_500_000+3600*500_500), r.BoundNs(3600e9, rate), "an hour on")
	assert.Equal(t, int64(PhaseLimitUs*1000+500_000), Reading{MaxErrorUs: 1 << 40}.BoundNs(0, rate), "the kernel's clamp")
	assert.Equal(t, int64(500_000), Reading{MaxErrorUs: -5}.BoundNs(0, rate))
	assert.Equal(t, int64(4_616_297_705_945_816), r.BoundNs(math.MaxInt64, rate), "292 years on")
	assert.Equal(t, int64(maxBoundNs), r.BoundNs(math.MaxInt64, 999_999_999), "saturated")
}

// TestGrowthNsIsExact holds GrowthNs to big.Int's ceil(age·ppb/1e9) on
// both of its paths (the read path's small ages and the 128-bit one).
func TestGrowthNsIsExact(t *testing.T) {
	for _, age := range []int64{1, 999, 1e9 - 1, 1e9, 1<<33 - 1, 1 << 33, 1 << 40, 1 << 60, math.MaxInt64} {
		for _, ppb := range []int64{1, 15_000, 500_500, 1<<30 - 1, 1 << 30, 999_999_999} {
			want := new(big.Int).Mul(big.NewInt(age), big.NewInt(ppb))
			want.Add(want, big.NewInt(1e9-1))
			want.Quo(want, big.NewInt(1e9))
			if want.Cmp(big.NewInt(maxBoundNs)) > 0 {
				want = big.NewInt(maxBoundNs)
			}
			assert.Equal(t, want.Int64(), GrowthNs(age, ppb), "%d ns at %d ppb", age, ppb)
		}
	}
	assert.Zero(t, GrowthNs(0, 500_000))
	assert.Zero(t, GrowthNs(-1, 500_000))
	assert.Zero(t, GrowthNs(1e9, 0))
}

// TestAgeAtLimitNs: how long until maxerror, growing at the rate, passes
// 16 s.
func TestAgeAtLimitNs(t *testing.T) {
	assert.Equal(t, int64(32_000e9), Reading{MaxErrorUs: 0}.AgeAtLimitNs(500_000))
	assert.Equal(t, int64(2e9), Reading{MaxErrorUs: PhaseLimitUs - 1000}.AgeAtLimitNs(500_000))
	assert.Equal(t, int64(0), Reading{MaxErrorUs: PhaseLimitUs}.AgeAtLimitNs(500_000))
	assert.Less(t, Reading{MaxErrorUs: 0}.AgeAtLimitNs(500_500), int64(32_000e9), "a faster rate, sooner")
}

// TestSetSince: a later reading shows the values set again when esterror
// changed, or maxerror is below what a whole second's growth each gives;
// the growth alone (the kernel's 500 µs steps, up to the 16 s ceiling) is
// not a set.
func TestSetSince(t *testing.T) {
	r := Reading{MaxErrorUs: 2000, EstErrorUs: 100}
	grown := func(us int64) Reading { return Reading{MaxErrorUs: min(2000+us, PhaseLimitUs), EstErrorUs: 100} }
	assert.False(t, r.SetSince(grown(0), 0, 1000))
	assert.False(t, r.SetSince(grown(500), 1.2e9, 1000), "one step in 1.2 s")
	assert.False(t, r.SetSince(grown(1000), 1.9e9, 1000), "two steps in 1.9 s (a boundary each end)")
	assert.True(t, r.SetSince(grown(500), 2.1e9, 1000), "one step in 2.1 s: set again")
	assert.True(t, r.SetSince(Reading{MaxErrorUs: 2000, EstErrorUs: 90}, 0, 1000), "esterror changed")
	assert.True(t, r.SetSince(Reading{MaxErrorUs: 1000, EstErrorUs: 100}, 0, 1000), "maxerror went down")
	assert.False(t, r.SetSince(grown(PhaseLimitUs), 1e15, 1000), "at the ceiling")
	assert.True(t, r.SetSince(Reading{MaxErrorUs: 2000, EstErrorUs: 100}, 10e9, 1000), "no growth in 10 s")
}

// TestSlewPPB: the tick's and the frequency's share of CLOCK_REALTIME's
// pace.
func TestSlewPPB(t *testing.T) {
	assert.Zero(t, Reading{Tick: NominalTick}.SlewPPB())
	assert.Equal(t, int64(-800_000), Reading{Tick: 9992}.SlewPPB(), "8 µs short a tick: -800 ppm")
	assert.Equal(t, int64(500_000), Reading{Tick: NominalTick, Freq: 500 << 16}.SlewPPB())
	assert.InDelta(t, 140_102, Reading{Tick: 9992, Freq: 940_102 * 65536 / 1000}.SlewPPB(), 1, "chronyd's 940 ppm with the tick's -800")
}

// TestUnsynchronised: each clause of the kernel's is_error_status, and
// TIME_ERROR.
func TestUnsynchronised(t *testing.T) {
	for status, want := range map[int32]string{
		0:                                        "",
		StaPLL:                                   "",
		StaUnsync:                                "STA_UNSYNC",
		StaClockErr:                              "STA_CLOCKERR",
		StaPPSFreq:                               "PPS discipline without a PPS signal",
		StaPPSTime | StaPPSSignal:                "",
		StaPPSTime:                               "PPS discipline without a PPS signal",
		StaPPSTime | StaPPSSignal | StaPPSJitter: "PPS jitter",
		StaPPSFreq | StaPPSSignal | StaPPSWander: "PPS wander or calibration error",
		StaPPSFreq | StaPPSSignal | StaPPSError:  "PPS wander or calibration error",
	} {
		assert.Equal(t, want, Reading{Status: status}.Unsynchronised(), "status %#x", status)
	}
	assert.Equal(t, "TIME_ERROR", Reading{State: TimeError}.Unsynchronised())
}

// TestReadHere: adjtimex with modes 0 answers on Linux with values the
// kernel can have produced; elsewhere it says it is not available.
func TestReadHere(t *testing.T) {
	r, err := Read()
	if runtime.GOOS != "linux" {
		assert.ErrorIs(t, err, ErrUnsupported)
		return
	}
	require.NoError(t, err)
	assert.NoError(t, r.Check())
	assert.True(t, r.State >= 0 && r.State <= TimeError, "state %d", r.State)
	assert.True(t, r.Tick > NominalTick*9/10 && r.Tick < NominalTick*11/10, "tick %d", r.Tick)
	t.Logf("maxerror %d µs, esterror %d µs, status %#x, state %d (%q), slew %d ppb", r.MaxErrorUs, r.EstErrorUs, r.Status, r.State, r.Unsynchronised(), r.SlewPPB())
}

// FuzzReading: the arithmetic on any values adjtimex could return (and
// values it could not) never panics, never gives a bound below maxerror
// (clamped) plus a step, never shrinks with age, and agrees with Check
// and the growth's own rule: the values as grown are never a set.
func FuzzReading(f *testing.F) {
	f.Add(int64(16_000_000), int64(16_000_000), int32(StaUnsync), 5, int64(1e9), int64(1000))
	f.Add(int64(1500), int64(120), int32(StaPLL), 0, int64(3_600e9), int64(1000))
	f.Fuzz(func(t *testing.T, maxErr, estErr int64, status int32, state int, age, margin int64) {
		r := Reading{MaxErrorUs: maxErr, EstErrorUs: estErr, Status: status, State: state}
		_ = r.Unsynchronised()
		rate := RatePPB(margin)
		if rate < 500_000 {
			t.Fatalf("rate %d below the kernel's", rate)
		}
		b := r.BoundNs(age, rate)
		floor := min(max(maxErr, 0), PhaseLimitUs)*1000 + 500_000
		if b < floor || b > maxBoundNs {
			t.Fatalf("bound %d outside [%d, %d]", b, floor, int64(maxBoundNs))
		}
		if age != math.MinInt64 && age < math.MaxInt64-1e9 && age > -1<<62 {
			if later := r.BoundNs(max(age, -age)+1e9, rate); later < b {
				t.Fatalf("the bound shrank: %d then %d", b, later)
			}
		}
		if r.Check() == nil && age > 0 {
			seconds := age / 1e9
			grownUs := min(maxErr+min(seconds, PhaseLimitUs/GrowthUsPerSec)*GrowthUsPerSec, PhaseLimitUs)
			if r.SetSince(Reading{MaxErrorUs: grownUs, EstErrorUs: estErr}, age, max(margin, 0)) {
				t.Fatalf("the kernel's growth alone over %d ns counted as a set", age)
			}
		}
		if a := r.AgeAtLimitNs(rate); a < 0 {
			t.Fatalf("negative age at the limit: %d", a)
		}
	})
}
