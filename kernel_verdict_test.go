package schedclock

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKernelVerdictFixtures(t *testing.T) {
	tests := []struct {
		dir  string
		keep bool
		say  string
	}{
		{"tsc", true, "kernel clocksource is tsc"},
		{"tsc-demoted", false, "kernel clocksource is hpet, not tsc (tsc not available: available are hpet acpi_pm)"},
		{"tsc-switched-by-hand", false, "kernel clocksource is hpet, not tsc (tsc still available)"},
		// Recorded on the KVM guest these tests were written on (booted
		// with tsc=unstable).
		{"kvm-clock-guest", false, "kernel clocksource is kvm-clock, not tsc (tsc not available: available are kvm-clock)"},
		{"empty", false, "kernel clocksource is empty, not tsc"},
		{"no-available", false, "kernel clocksource is acpi_pm, not tsc"},
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			v := readKernelVerdict(filepath.Join("testdata", "clocksource", tt.dir, "current_clocksource"), "tsc")
			assert.True(t, v.Known())
			assert.Equal(t, tt.keep, v.Keep())
			assert.Equal(t, tt.say, v.String())
			if tt.keep {
				assert.NoError(t, v.untrusted("tsc"))
			} else {
				err := v.untrusted("tsc")
				assert.ErrorIs(t, err, ErrUntrusted)
				assert.Equal(t, `schedclock: counter not trusted "tsc": `+tt.say, err.Error())
			}
		})
	}
}

func TestKernelVerdictWithoutSysfs(t *testing.T) {
	v := readKernelVerdict(filepath.Join(t.TempDir(), "current_clocksource"), "tsc")
	assert.False(t, v.Known())
	assert.ErrorIs(t, v.Err, fs.ErrNotExist)
	assert.True(t, v.Keep(), "no verdict: the counter keeps the trust CPUID gave it")
	assert.NoError(t, v.untrusted("tsc"))
	assert.Contains(t, v.String(), "kernel clocksource unknown (open ")
}

// TestKernelVerdictFollowsTheFile re-reads one file as the watchdog
// rewrites it: each reading says what the file says now.
func TestKernelVerdictFollowsTheFile(t *testing.T) {
	dir := t.TempDir()
	current := filepath.Join(dir, "current_clocksource")
	write := func(name, content string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	write("current_clocksource", "tsc\n")
	write("available_clocksource", "tsc hpet acpi_pm \n")
	assert.True(t, readKernelVerdict(current, "tsc").Keep())

	// Hours later the watchdog demotes the TSC.
	write("current_clocksource", "hpet\n")
	write("available_clocksource", "hpet acpi_pm \n")
	v := readKernelVerdict(current, "tsc")
	assert.False(t, v.Keep())
	assert.Equal(t, []string{"hpet", "acpi_pm"}, v.Available)

	// The same reading serves the arm64 counter.
	write("current_clocksource", "arch_sys_counter\n")
	assert.True(t, readKernelVerdict(current, "arch_sys_counter").Keep())
}

// TestKernelTSCVerdictHere reads the real file: whatever it says, the
// verdict agrees with the start-up probe's reading of it.
func TestKernelTSCVerdictHere(t *testing.T) {
	v := kernelTSCVerdict()
	t.Logf("%s", v)
	if cs := readClocksource(); cs != "" {
		assert.Equal(t, cs, v.Current)
		assert.Equal(t, cs == "tsc", v.Keep())
	} else {
		assert.True(t, v.Keep())
	}
}
