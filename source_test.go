package schedclock_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
)

// Source (source.go): what New and Register refuse, the portable
// source, and the names of the rate's origins.

// TestPortable: the portable source counts Go's monotonic clock in
// nanoseconds, so that over any interval it advances by what time.Since
// measures around it.
func TestPortable(t *testing.T) {
	src := schedclock.Portable()
	assert.Equal(t, "portable", src.Name)
	assert.Equal(t, 63, src.Bits) // the runtime's nanotime is an int64
	assert.Equal(t, uint64(1e9), src.Rate)
	require.NotNil(t, src.Read)
	outer := time.Now()
	first := src.Read()
	inner := time.Now()
	time.Sleep(5 * time.Millisecond)
	innerEnd := time.Now()
	last := src.Read()
	outerEnd := time.Now()
	// Both clocks are the runtime's monotonic clock: the source's advance
	// lies within the brackets' however loaded the machine is.
	assert.GreaterOrEqual(t, time.Duration(last-first), innerEnd.Sub(inner), "slower than the monotonic clock")
	assert.LessOrEqual(t, time.Duration(last-first), outerEnd.Sub(outer), "faster than the monotonic clock")
	c, err := schedclock.New(src)
	require.NoError(t, err)
	require.NoError(t, c.Close())
}

func TestInvalidSourcesAreRefused(t *testing.T) {
	f := &schedclock.FakeCounter{}
	for name, src := range map[string]schedclock.Source{
		"nil read":  {Name: "x", Bits: 64, Rate: ghz},
		"0 bits":    f.Source("x", 0, ghz),
		"65 bits":   f.Source("x", 65, ghz),
		"-1 bits":   f.Source("x", -1, ghz),
		"0 Hz":      f.Source("x", 64, 0),
		"too fast":  f.Source("x", 1, ghz), // a 1-bit counter at 1 GHz wraps every 2 ns
		"rate 2^64": f.Source("x", 64, ^uint64(0)),
	} {
		c, err := schedclock.New(src)
		assert.Nil(t, c, name)
		assert.ErrorIs(t, err, schedclock.ErrInvalidSource, name)
	}

	// A refused Register changes nothing.
	c, fc := newFake(t, 64, ghz)
	fc.Add(1000)
	before := c.Info()
	for _, src := range []schedclock.Source{{Name: "nil", Bits: 64, Rate: 2 * ghz}, f.Source("x", 65, 2*ghz), f.Source("x", 64, 0)} {
		assert.ErrorIs(t, c.Register(src), schedclock.ErrInvalidSource)
	}
	assert.Equal(t, before, c.Info())
	assert.Equal(t, schedclock.Instant(1000), c.Now())
	fc.Add(1)
	assert.Equal(t, schedclock.Instant(1001), c.Now())
}

func TestRateOriginNames(t *testing.T) {
	for o, name := range map[schedclock.RateOrigin]string{
		schedclock.RateDeclared: "declared", schedclock.RateCPUID: "cpuid", schedclock.RateHypervisor: "hypervisor leaf",
		schedclock.RateMeasured: "measured", schedclock.RateCNTFRQ: "cntfrq", schedclock.RateRefined: "refined", schedclock.RateOrigin(99): "rateOrigin(99)",
	} {
		assert.Equal(t, name, o.String())
	}
}

// TestHardwareIsThisArchitecturesCounter: Hardware returns this
// architecture's counter register, or its refusal, and on an
// architecture without one an error wrapping ErrUnsupported.
func TestHardwareIsThisArchitecturesCounter(t *testing.T) {
	src, err := schedclock.Hardware()
	own, ok := map[string]func() (schedclock.Source, error){
		"amd64": schedclock.TSC, "arm64": schedclock.CNTVCT, "riscv64": schedclock.RDTIME,
		"ppc64le": schedclock.TimeBase, "s390x": schedclock.TOD, "loong64": schedclock.StableCounter,
	}[runtime.GOARCH]
	if !ok {
		require.ErrorIs(t, err, schedclock.ErrUnsupported)
		assert.Contains(t, err.Error(), runtime.GOARCH)
		return
	}
	want, wantErr := own()
	if wantErr != nil {
		require.Error(t, err)
		assert.Equal(t, wantErr.Error(), err.Error())
		assert.ErrorIs(t, err, schedclock.ErrUnsupported, "a refusal, untrusted ones included, is an ErrUnsupported")
		return
	}
	require.NoError(t, err)
	assert.Equal(t, want.Name, src.Name)
	assert.Equal(t, want.Bits, src.Bits)
	// Where the rate is measured (no register or firmware gives it), two
	// calls measure it twice: the same to well within 0.1%.
	assert.InEpsilon(t, float64(want.Rate), float64(src.Rate), 1e-3)
	a := src.Read()
	b := want.Read()
	assert.LessOrEqual(t, a, b, "Hardware's Read is the same counter, read before")
}
