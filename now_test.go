package schedclock_test

import (
	"fmt"
	"math"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/internal/cpu"
)

// The read path (now.go, now_amd64.{go,s}, now_other.go) through the
// public API: what Now returns for every counter value, a counter below
// the epoch, one far ahead of it, and that it allocates nothing.
// now_internal_test.go holds the tests that publish lines by hand.

func TestCounterSteppingBackwardsIsClamped(t *testing.T) {
	c, f := newFake(t, 64, ghz)
	f.Set(10_000)
	c.Update()
	assert.Equal(t, schedclock.Instant(10_000), c.Now())
	// Below the epoch: read as a negative delta, clamped to the epoch,
	// never as a jump of centuries.
	f.Set(9_000)
	assert.Equal(t, schedclock.Instant(10_000), c.Now())
	f.Set(0)
	assert.Equal(t, schedclock.Instant(10_000), c.Now())
	// An update there re-anchors: time goes on from the epoch value.
	c.Update()
	assert.Equal(t, schedclock.Instant(10_000), c.Now())
	f.Set(500)
	assert.Equal(t, schedclock.Instant(10_500), c.Now())

	// Narrow counters too: an 8-bit counter one count behind its epoch
	// reads as 255 counts ahead without the clamp.
	c8, f8 := newFake(t, 8, 100)
	f8.Set(100)
	c8.Update()
	at := c8.Now()
	f8.Set(99)
	assert.Equal(t, at, c8.Now())
}

// Saturation: no counter value makes Now wrap int64 or fall below the
// epoch.
func TestNowSaturates(t *testing.T) {
	c, f := newFake(t, 64, ghz)
	f.Set(5000)
	c.Update()
	require.Equal(t, schedclock.Instant(5000), c.Now())
	f.StepBack(1<<61 + 1) // just outside the negative zone: 2^64-2^61-1 cycles ahead
	assert.Equal(t, schedclock.Instant(math.MaxInt64), c.Now())
	f.Set(math.MaxUint64) // inside it: below the epoch
	assert.Equal(t, schedclock.Instant(5000), c.Now())
	c24, f24 := newFake(t, 64, 24_000_000)
	f24.Set(1 << 62)
	assert.Equal(t, schedclock.Instant(math.MaxInt64), c24.Now())
}

func TestStalledRefresherTakesThe128BitPath(t *testing.T) {
	for _, rate := range []uint64{ghz, 3 * ghz, 24_000_000} {
		c, f := newFake(t, 64, rate)
		info := c.Info()
		// Far past the point where delta*mult overflows 64 bits: for
		// 3 GHz that is after about 2.4 hours; this is 2^44 cycles on top
		// of a first step, hours to days of counter time.
		for _, cycles := range []uint64{1 << 30, 1<<44 + 12345, 1<<50 + 1} {
			f.Set(cycles)
			require.Equal(t, exactNanos(cycles, info), c.Now(), "%d Hz after %d cycles", rate, cycles)
		}
		// An update folds it all in, exactly.
		c.Update()
		assert.Equal(t, exactNanos(1<<50+1, info), c.Now())
		f.Add(rate)
		assert.Equal(t, exactNanos(1<<50+1+rate, info), c.Now())
	}
}

func TestNowAllocatesNothing(t *testing.T) {
	c, f := newFake(t, 64, ghz)
	assert.Zero(t, testing.AllocsPerRun(1000, func() { f.Add(1); c.Now() }))
	assert.Zero(t, testing.AllocsPerRun(1000, func() { schedclock.Now() }))
	c.Suspend()
	assert.Zero(t, testing.AllocsPerRun(1000, func() { c.Now() }))
}

// TestHostileCounters runs counters of every width and a wide range of
// rates through what real counters do wrong: steps back by one tick, by
// as much as still reads as negative, and by one tick more; and a
// refresher stalled far past the 64-bit overflow horizon. Now must equal
// the definition (big-integer arithmetic, saturated at math.MaxInt64),
// never fall below the epoch, and never wrap.
func TestHostileCounters(t *testing.T) {
	for _, bits := range []int{1, 8, 16, 63, 64} {
		for _, rate := range []uint64{1, 32768, 24_000_000, ghz, 10 * ghz} {
			name := fmt.Sprintf("%d bits at %d Hz", bits, rate)
			f := &schedclock.FakeCounter{}
			c, err := schedclock.New(f.Source("hostile", bits, rate))
			wrap := new(big.Int).Lsh(big.NewInt(1), uint(bits))
			wrap.Mul(wrap, big.NewInt(ghz)).Div(wrap, new(big.Int).SetUint64(rate))
			if err != nil {
				// Only counters that wrap too fast for the refresh
				// goroutine are refused.
				assert.ErrorIs(t, err, schedclock.ErrInvalidSource, name)
				assert.True(t, wrap.Cmp(big.NewInt(int64(667*time.Millisecond))) < 0, "%s refused: %v", name, err)
				continue
			}
			info := c.Info()
			mask := ^uint64(0) >> (64 - bits)
			// Forward, folding within each refresh period: exact.
			step := max(1, uint64(info.RefreshPeriod)*rate/ghz/2)
			var total uint64
			for i := 0; i < 5; i++ {
				total += step
				f.Set(total & mask)
				c.Update()
			}
			at := c.Now()
			require.Equal(t, exactNanos(total, info), at, name)
			epoch := total & mask
			for _, back := range []uint64{1, mask >> 3, mask>>3 + 1} {
				f.Set((epoch - back) & mask)
				now := c.Now()
				assert.GreaterOrEqual(t, now, at, "%s, %d cycles back: below the epoch", name, back)
				switch {
				case bits < 4:
					// No negative zone: a step back reads as a step forward.
				case back <= mask>>3:
					assert.Equal(t, at, now, "%s, %d cycles back: not clamped to the epoch", name, back)
				default:
					// Just outside the negative zone: read as far ahead.
					assert.Equal(t, saturatedNanos(total, mask-back+1, info), now, "%s, %d cycles back", name, back)
				}
			}
			if bits >= 63 {
				// Stalled far past the overflow horizon: the 128-bit path,
				// then saturation.
				for _, ahead := range []uint64{1 << 40, 1 << 52, 1 << 62} {
					f.Set((epoch + ahead) & mask)
					assert.Equal(t, saturatedNanos(total, ahead, info), c.Now(), "%s, %d cycles ahead", name, ahead)
				}
			}
			require.NoError(t, c.Close())
		}
	}
}

// saturatedNanos is the clock's value, from a start at counter 0, when the
// counter is ahead cycles past an epoch folded at total cycles: the
// definition, saturated at math.MaxInt64.
func saturatedNanos(total, ahead uint64, info schedclock.Info) schedclock.Instant {
	v := new(big.Int).SetUint64(total)
	v.Add(v, new(big.Int).SetUint64(ahead))
	v.Mul(v, big.NewInt(int64(info.Mult)))
	v.Rsh(v, uint(info.Shift))
	if !v.IsInt64() {
		return math.MaxInt64
	}
	return schedclock.Instant(v.Int64())
}

// Instant (now.go): arithmetic that saturates, and a type that a
// Unix time or a plain integer does not convert to by itself.

func TestInstantSubAndAdd(t *testing.T) {
	const maxI, minI = schedclock.Instant(math.MaxInt64), schedclock.Instant(math.MinInt64)
	a := schedclock.Instant(5_000)
	assert.Equal(t, 2*time.Microsecond, a.Sub(3_000))
	assert.Equal(t, -2*time.Microsecond, schedclock.Instant(3_000).Sub(a))
	assert.Equal(t, schedclock.Instant(6_500), a.Add(1500*time.Nanosecond))
	assert.Equal(t, schedclock.Instant(3_500), a.Add(-1500*time.Nanosecond))
	for _, c := range []struct {
		t, u schedclock.Instant
		want time.Duration
	}{
		{maxI, minI, math.MaxInt64},
		{minI, maxI, math.MinInt64},
		{maxI, -1, math.MaxInt64},
		{minI, 1, math.MinInt64},
		{maxI, 0, math.MaxInt64},
		{-1, maxI, math.MinInt64},
		{0, minI, math.MaxInt64},
		{minI, minI, 0},
	} {
		assert.Equal(t, c.want, c.t.Sub(c.u), "%d - %d", c.t, c.u)
	}
	assert.Equal(t, maxI, maxI.Add(1))
	assert.Equal(t, maxI, schedclock.Instant(1).Add(math.MaxInt64))
	assert.Equal(t, minI, minI.Add(-1))
	assert.Equal(t, minI, schedclock.Instant(-2).Add(math.MinInt64))
	assert.Equal(t, schedclock.Instant(-1), maxI.Add(math.MinInt64))
}

// TestInstantOrder: Before and After are < and >, and an Instant is
// neither before nor after itself, as time.Time's are.
func TestInstantOrder(t *testing.T) {
	for _, c := range []struct {
		t, u          schedclock.Instant
		before, after bool
	}{
		{1, 2, true, false},
		{2, 1, false, true},
		{5, 5, false, false},
		{math.MinInt64, math.MaxInt64, true, false},
		{-1, 0, true, false},
	} {
		assert.Equal(t, c.before, c.t.Before(c.u), "%d.Before(%d)", c.t, c.u)
		assert.Equal(t, c.after, c.t.After(c.u), "%d.After(%d)", c.t, c.u)
	}
}

// TestInstantString: an Instant prints as the time.Duration since its
// clock's start, for %v and %s alike, and %d still prints the integer.
func TestInstantString(t *testing.T) {
	for i, want := range map[schedclock.Instant]string{
		0:             "0s",
		1_234_567_891: "1.234567891s",
		1500:          "1.5µs",
		-2_000_000:    "-2ms",
		math.MaxInt64: "2562047h47m16.854775807s",
		90 * 1e9:      "1m30s",
	} {
		assert.Equal(t, want, i.String())
		assert.Equal(t, want+" "+want, fmt.Sprintf("%v %s", i, i))
	}
	assert.Equal(t, "1500", fmt.Sprintf("%d", schedclock.Instant(1500)))
}

// TestAUnixTimeIsNotAnInstant: schedclock.Since(time.Now().UnixNano())
// does not compile, and the same line with the conversion does.
func TestAUnixTimeIsNotAnInstant(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs with the go command")
	}
	if cpu.Emulated() {
		t.Skip("builds host programs: not under an emulator")
	}
	gocmd, err := exec.LookPath("go")
	require.NoError(t, err)
	build := func(name string) (string, error) {
		cmd := exec.Command(gocmd, "build", "-o", filepath.Join(t.TempDir(), name), "./testdata/typed/"+name)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := build("instantok")
	require.NoError(t, err, "the explicit conversion must compile:\n%s", out)
	out, err = build("unixsince")
	require.Error(t, err, "schedclock.Since(time.Now().UnixNano()) compiled")
	assert.Contains(t, out, "cannot use time.Now().UnixNano()")
	assert.Contains(t, out, "schedclock.Instant")
}
