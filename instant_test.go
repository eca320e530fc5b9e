package schedclock_test

import (
	"math"
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

// Instant (instant.go): arithmetic that saturates, and a type that a
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
