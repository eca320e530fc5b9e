package schedclock

import (
	"io/fs"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRDTIME(t *testing.T) {
	testTimerCounter(t, timerCounter{
		name: "rdtime", arch: "riscv64", supported: rdtimeSupported,
		construct: rdtimeSource, probe: probeRDTIME,
		origins: []rateOrigin{rateDeviceTree, rateMeasured},
	})
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
