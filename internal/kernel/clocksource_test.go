package kernel

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/testenv"
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
			v := ReadVerdict(filepath.Join("testdata", "clocksource", tt.dir, "current_clocksource"), "tsc")
			assert.True(t, v.Known())
			assert.Equal(t, tt.keep, v.Keep())
			assert.Equal(t, tt.say, v.String())
		})
	}
}

func TestKernelVerdictWithoutSysfs(t *testing.T) {
	v := ReadVerdict(filepath.Join(t.TempDir(), "current_clocksource"), "tsc")
	assert.False(t, v.Known())
	assert.ErrorIs(t, v.Err, fs.ErrNotExist)
	assert.True(t, v.Keep(), "no verdict: the counter keeps the trust CPUID gave it")
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
	assert.True(t, ReadVerdict(current, "tsc").Keep())

	// Hours later the watchdog demotes the TSC.
	write("current_clocksource", "hpet\n")
	write("available_clocksource", "hpet acpi_pm \n")
	v := ReadVerdict(current, "tsc")
	assert.False(t, v.Keep())
	assert.Equal(t, []string{"hpet", "acpi_pm"}, v.Available)

	// The same reading serves the arm64 counter.
	write("current_clocksource", "arch_sys_counter\n")
	assert.True(t, ReadVerdict(current, "arch_sys_counter").Keep())
}

// TestKernelTSCVerdictHere reads the real file: whatever it says, the
// verdict agrees with Clocksource's reading of it, the one the clock's
// start-up probe takes.
func TestKernelTSCVerdictHere(t *testing.T) {
	v := TSCVerdict()
	t.Logf("%s", v)
	if cs := Clocksource(); cs != "" {
		assert.Equal(t, cs, v.Current)
		assert.Equal(t, cs == "tsc", v.Keep())
	} else {
		assert.True(t, v.Keep())
	}
}

func TestReadClocksource(t *testing.T) {
	content, err := os.ReadFile(ClocksourcePath)
	if err != nil {
		assert.Empty(t, Clocksource())
		return
	}
	want := strings.TrimSpace(string(content))
	require.NotEmpty(t, want)
	assert.Equal(t, want, Clocksource())
}

// TestMonotonicRaw reads the raw clock twice, inside two readings of Go's
// monotonic clock and around two more: it moves forwards by at least
// what Go's clock saw between the reads and at most what it saw around
// them (NTP slews that one by at most 500 ppm), however loaded the
// machine.
func TestMonotonicRaw(t *testing.T) {
	start := time.Now()
	a, err := MonotonicRaw()
	if !HasMonotonicRaw {
		assert.ErrorIs(t, err, errors.ErrUnsupported)
		return
	}
	require.NoError(t, err)
	inner := time.Now()
	innerEnd := time.Now()
	for innerEnd.Sub(inner) < 100*time.Microsecond {
		innerEnd = time.Now()
	}
	b, err := MonotonicRaw()
	around := time.Since(start)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Duration(b-a), innerEnd.Sub(inner)*999/1000)
	assert.LessOrEqual(t, time.Duration(b-a), around*1001/1000+time.Microsecond)
}

// TestTheVerdictReadsThisKernelsSysfs: the TSC verdict read from the
// real sysfs path, on a machine made to play each kernel (files
// bind-mounted over current_clocksource and available_clocksource in a
// private mount namespace): kept on a kernel on the TSC, refused on one
// on kvm-clock, with the TSC still among the available ones (switched
// away by hand) or not (demoted by the watchdog).
func TestTheVerdictReadsThisKernelsSysfs(t *testing.T) {
	dir := filepath.Dir(ClocksourcePath) + "/"
	for _, c := range []struct {
		current, available string
		keep               bool
		says               string
	}{
		{"tsc", "tsc kvm-clock", true, "kernel clocksource is tsc"},
		{"kvm-clock", "tsc kvm-clock", false, "kernel clocksource is kvm-clock, not tsc (tsc still available"},
		{"kvm-clock", "kvm-clock", false, "kernel clocksource is kvm-clock, not tsc (tsc not available"},
	} {
		var v Verdict
		var cs string
		testenv.WithFiles(t, map[string]string{
			dir + "current_clocksource":   c.current + "\n",
			dir + "available_clocksource": c.available + " \n",
		}, func() {
			v, cs = TSCVerdict(), Clocksource()
		})
		assert.Equal(t, c.current, cs)
		assert.Equal(t, c.keep, v.Keep(), "%+v", c)
		assert.Contains(t, v.String(), c.says)
	}
}
