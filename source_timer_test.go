package schedclock

import (
	"io/fs"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testMeasures are the checks' measures in these tests: Go's monotonic
// clock as the portable source and as the reference of a rate.
var testMeasures = measures{Portable: mono, Rate: measureAgainstMono}

// measureAgainstMono measures read's rate over d against mono, from one
// pair of readings at each end.
func measureAgainstMono(read func() uint64, d time.Duration) (hz, errPPM float64, err error) {
	c0, m0 := read(), mono()
	time.Sleep(d)
	c1, m1 := read(), mono()
	return float64(c1-c0) / float64(m1-m0) * 1e9, 1e3 / float64(m1-m0) * 1e6, nil
}

func TestPrepareReadCost(t *testing.T) {
	src := Source{Name: "fast", Read: func() uint64 { return 42 }, Bits: 64}
	prepared, check := prepareReadCost(src)
	assert.Equal(t, funcPtr(src.Read), funcPtr(prepared.Read), "the read is kept as it is")
	found, err := check(testMeasures)
	require.NoError(t, err)
	assert.Contains(t, found, "fast: read ")

	_, check = prepareReadCost(Source{Name: "off", Read: mono, Bits: 64, Rate: 100_000_000})
	_, err = check(testMeasures)
	assert.ErrorIs(t, err, errUntrusted)
	assert.EqualError(t, err, `schedclock: counter not trusted "off": does not run at the stated 100000000 Hz`)

	_, check = prepareReadCost(Source{Name: "trapped", Read: slowRead, Bits: 64})
	found, err = check(testMeasures)
	assert.ErrorIs(t, err, errUntrusted)
	assert.Contains(t, err.Error(), `"trapped": read `)
	assert.Contains(t, err.Error(), "slower than the portable source")
	assert.Contains(t, found, "slower than the portable source")
}

func TestRDTIMERate(t *testing.T) {
	rate, origin, errPPM, err := rdtimeRate([]byte{0x00, 0x98, 0x96, 0x80}, nil)
	require.NoError(t, err)
	assert.Equal(t, uint64(10_000_000), rate)
	assert.Equal(t, rateDeviceTree, origin)
	assert.Equal(t, float64(nominalRateErrPPM), errPPM)

	// No device tree (qemu-user, ACPI): measured.
	rate, origin, _, err = rdtimeRate(nil, fs.ErrNotExist)
	require.NoError(t, err)
	assert.Equal(t, rateMeasured, origin)
	assert.Zero(t, rate)

	for _, tt := range []struct {
		name     string
		property []byte
		readErr  error
		msg      string
	}{
		{"unreadable", nil, fs.ErrPermission,
			`schedclock: counter not trusted "rdtime": reading /proc/device-tree/cpus/timebase-frequency: permission denied`},
		{"zero", []byte{0, 0, 0, 0}, nil,
			`schedclock: counter not trusted "rdtime": /proc/device-tree/cpus/timebase-frequency: timebase: no counter rate: timebase-frequency is 0`},
		{"two cells", []byte{0, 0, 0, 0, 0, 0x98, 0x96, 0x80}, nil,
			`schedclock: counter not trusted "rdtime": /proc/device-tree/cpus/timebase-frequency: timebase: no counter rate: timebase-frequency is 8 bytes, want one 32-bit cell (4 bytes)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rate, _, _, err := rdtimeRate(tt.property, tt.readErr)
			assert.ErrorIs(t, err, errUntrusted)
			assert.EqualError(t, err, tt.msg)
			assert.Zero(t, rate)
		})
	}
}

func TestTimeBaseRate(t *testing.T) {
	power9, err := os.ReadFile("internal/timebase/testdata/cpuinfo/power9-powernv")
	require.NoError(t, err)
	rate, origin, errPPM, err := timebaseRate(power9, nil)
	require.NoError(t, err)
	assert.Equal(t, uint64(512_000_000), rate)
	assert.Equal(t, rateCPUInfo, origin)
	assert.Equal(t, float64(nominalRateErrPPM), errPPM)

	// Another architecture's cpuinfo (qemu-user on this machine), or none:
	// measured.
	host, err := os.ReadFile("internal/timebase/testdata/cpuinfo/qemu-user-on-amd64-epyc")
	require.NoError(t, err)
	for _, in := range []struct {
		cpuinfo []byte
		readErr error
	}{{host, nil}, {nil, fs.ErrNotExist}} {
		rate, origin, _, err = timebaseRate(in.cpuinfo, in.readErr)
		require.NoError(t, err)
		assert.Equal(t, rateMeasured, origin)
		assert.Zero(t, rate)
	}

	for _, tt := range []struct {
		name    string
		cpuinfo string
		readErr error
		msg     string
	}{
		{"unreadable", "", fs.ErrPermission, `schedclock: counter not trusted "timebase": reading /proc/cpuinfo: permission denied`},
		{"zero", "timebase\t: 0\n", nil, `schedclock: counter not trusted "timebase": /proc/cpuinfo: timebase: no counter rate: cpuinfo timebase is 0`},
		{"not a number", "timebase\t: 512MHz\n", nil, `schedclock: counter not trusted "timebase": /proc/cpuinfo: timebase: no counter rate: cpuinfo timebase "512MHz" is not a rate in Hz`},
		{"two rates", "timebase\t: 512000000\ntimebase\t: 1\n", nil, `schedclock: counter not trusted "timebase": /proc/cpuinfo: timebase: no counter rate: cpuinfo gives two timebase rates, 512000000 and 1`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rate, _, _, err := timebaseRate([]byte(tt.cpuinfo), tt.readErr)
			assert.ErrorIs(t, err, errUntrusted)
			assert.EqualError(t, err, tt.msg)
			assert.Zero(t, rate)
		})
	}
}

// TestTODRate: bit 51 of the TOD clock is one microsecond, so one µs is
// 1<<(63-51) units.
func TestTODRate(t *testing.T) {
	assert.Equal(t, uint64(1)<<(63-51)*1_000_000, uint64(todRate))
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
