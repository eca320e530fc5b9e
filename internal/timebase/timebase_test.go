package timebase

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixtures returns the files of testdata/dir by name.
func fixtures(tb testing.TB, dir string) map[string][]byte {
	tb.Helper()
	entries, err := os.ReadDir(filepath.Join("testdata", dir))
	require.NoError(tb, err)
	require.NotEmpty(tb, entries, "no fixtures in testdata/%s", dir)
	out := map[string][]byte{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join("testdata", dir, e.Name()))
		require.NoError(tb, err)
		out[e.Name()] = data
	}
	return out
}

func TestDeviceTreeFrequencyFixtures(t *testing.T) {
	want := map[string]uint64{
		"qemu-virt":               10_000_000,
		"sifive-hifive-unmatched": 1_000_000,
		"starfive-visionfive2":    4_000_000,
		"allwinner-d1":            24_000_000,
		"thead-th1520":            3_000_000,
	}
	files := fixtures(t, "devicetree")
	require.Len(t, files, len(want))
	for name, property := range files {
		hz, err := DeviceTreeFrequency(property)
		require.NoError(t, err, name)
		assert.Equal(t, want[name], hz, name)
	}
}

func TestDeviceTreeFrequencyRefusals(t *testing.T) {
	for _, tt := range []struct {
		name     string
		property []byte
		msg      string
	}{
		{"empty", nil, "timebase: no counter rate: timebase-frequency is 0 bytes, want one 32-bit cell (4 bytes)"},
		{"short", []byte{0x00, 0x98, 0x96}, "timebase: no counter rate: timebase-frequency is 3 bytes, want one 32-bit cell (4 bytes)"},
		{"two cells", []byte{0, 0, 0, 0, 0x00, 0x98, 0x96, 0x80}, "timebase: no counter rate: timebase-frequency is 8 bytes, want one 32-bit cell (4 bytes)"},
		{"zero", []byte{0, 0, 0, 0}, "timebase: no counter rate: timebase-frequency is 0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hz, err := DeviceTreeFrequency(tt.property)
			assert.ErrorIs(t, err, ErrNoRate)
			assert.EqualError(t, err, tt.msg)
			assert.Zero(t, hz)
		})
	}
}

func TestCPUInfoTimebaseFixtures(t *testing.T) {
	files := fixtures(t, "cpuinfo")
	for name, cpuinfo := range files {
		hz, err := CPUInfoTimebase(cpuinfo)
		if strings.HasPrefix(name, "qemu-user") {
			// qemu-user passes the host's (x86) cpuinfo through.
			assert.EqualError(t, err, "timebase: no counter rate: cpuinfo has no timebase line", name)
			continue
		}
		require.NoError(t, err, name)
		assert.Equal(t, uint64(512_000_000), hz, name)
	}
}

func TestCPUInfoTimebaseRefusals(t *testing.T) {
	for _, tt := range []struct {
		name, cpuinfo, msg string
	}{
		{"no line", "processor\t: 0\ncpu\t\t: POWER9\n", "timebase: no counter rate: cpuinfo has no timebase line"},
		{"zero", "timebase\t: 0\n", "timebase: no counter rate: cpuinfo timebase is 0"},
		{"not a number", "timebase\t: 512 MHz\n", `timebase: no counter rate: cpuinfo timebase "512 MHz" is not a rate in Hz`},
		{"negative", "timebase\t: -1\n", `timebase: no counter rate: cpuinfo timebase "-1" is not a rate in Hz`},
		{"overflow", "timebase\t: 18446744073709551616\n", `timebase: no counter rate: cpuinfo timebase "18446744073709551616" is not a rate in Hz`},
		{"two rates", "timebase\t: 512000000\ntimebase\t: 1000\n", "timebase: no counter rate: cpuinfo gives two timebase rates, 512000000 and 1000"},
		{"line too long", "processor\t: " + strings.Repeat("x", maxCPUInfoLine) + "\ntimebase\t: 512000000\n",
			"timebase: no counter rate: reading cpuinfo: bufio.Scanner: token too long"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hz, err := CPUInfoTimebase([]byte(tt.cpuinfo))
			assert.ErrorIs(t, err, ErrNoRate)
			assert.EqualError(t, err, tt.msg)
			assert.Zero(t, hz)
		})
	}
}

func TestCPUInfoTimebaseAcceptsTheKernelsLayouts(t *testing.T) {
	for _, cpuinfo := range []string{
		"timebase\t: 512000000\n",  // show_cpuinfo_summary's format
		"timebase\t: 512000000",    // no final newline
		"timebase : 512000000\r\n", // spaces, CRLF
		"timebase\t:512000000\n",
		"timebase\t: 512000000\ntimebase\t: 512000000\n", // repeated, agreeing
	} {
		hz, err := CPUInfoTimebase([]byte(cpuinfo))
		require.NoError(t, err, "%q", cpuinfo)
		assert.Equal(t, uint64(512_000_000), hz, "%q", cpuinfo)
	}
	// A key that only starts with timebase is another key.
	_, err := CPUInfoTimebase([]byte("timebase-frequency\t: 1\n"))
	assert.ErrorIs(t, err, ErrNoRate)
}

func TestStableCounterFrequency(t *testing.T) {
	// qemu-loongarch64's la464 and the Loongson 3A5000/3A6000: a 100 MHz
	// base clock, multiplier and divisor 1.
	hz, err := StableCounterFrequency(CPUCFG2LLFTP, 100_000_000, 1<<16|1)
	require.NoError(t, err)
	assert.Equal(t, uint64(100_000_000), hz)
	// multiply before dividing: 25 MHz * 3 / 4.
	hz, err = StableCounterFrequency(CPUCFG2LLFTP|1, 25_000_000, 4<<16|3)
	require.NoError(t, err)
	assert.Equal(t, uint64(18_750_000), hz)
	// the largest inputs do not overflow.
	hz, err = StableCounterFrequency(^uint32(0), ^uint32(0), 1<<16|0xffff)
	require.NoError(t, err)
	assert.Equal(t, uint64(0xffff_ffff)*0xffff, hz)

	for _, tt := range []struct {
		name             string
		cfg2, cfg4, cfg5 uint32
		msg              string
	}{
		{"no LLFTP", ^uint32(CPUCFG2LLFTP), 100_000_000, 1<<16 | 1, "timebase: no counter rate: CPUCFG 2 (0xffffbfff) has no constant-frequency timer (LLFTP, bit 14)"},
		{"no base", CPUCFG2LLFTP, 0, 1<<16 | 1, "timebase: no counter rate: CPUCFG gives base 0 Hz, multiplier 1, divisor 1 (firmware left one at 0)"},
		{"no multiplier", CPUCFG2LLFTP, 100_000_000, 1 << 16, "timebase: no counter rate: CPUCFG gives base 100000000 Hz, multiplier 0, divisor 1 (firmware left one at 0)"},
		{"no divisor", CPUCFG2LLFTP, 100_000_000, 1, "timebase: no counter rate: CPUCFG gives base 100000000 Hz, multiplier 1, divisor 0 (firmware left one at 0)"},
		{"under 1 Hz", CPUCFG2LLFTP, 1, 2<<16 | 1, "timebase: no counter rate: CPUCFG gives 1 Hz * 1 / 2, under 1 Hz"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hz, err := StableCounterFrequency(tt.cfg2, tt.cfg4, tt.cfg5)
			assert.ErrorIs(t, err, ErrNoRate)
			assert.EqualError(t, err, tt.msg)
			assert.Zero(t, hz)
		})
	}
}
