package schedclock

import (
	"io/fs"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTimeBase(t *testing.T) {
	testTimerCounter(t, timerCounter{
		name: "timebase", arch: "ppc64le", supported: timebaseSupported,
		construct: timeBaseSource, probe: probeTimeBase,
		origins: []rateOrigin{rateCPUInfo, rateMeasured},
	})
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
