package pvclock

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseTheRealMaps(t *testing.T) {
	raw, err := os.ReadFile("testdata/maps-firecracker-6.18.txt")
	require.NoError(t, err)
	maps := ParseMaps(string(raw))
	assert.Len(t, maps, strings.Count(string(raw), "\n"), "every line of /proc/self/maps is a mapping")
	loc, err := Locate(maps, "6.18.44-fc-v1294")
	require.NoError(t, err)
	assert.Equal(t, Location{Pvclock: 0x7f65e0964000, Hyperv: 0x7f65e0965000, Mapping: "[vvar_vclock]",
		Layout: "[vvar_vclock] (Linux 6.13+): pvclock page +0, hvclock page +1"}, loc)
}

func TestParseMapsLine(t *testing.T) {
	for line, want := range map[string]Mapping{
		"7f65e0964000-7f65e0966000 r--p 00000000 00:00 0                          [vvar_vclock]": {0x7f65e0964000, 0x7f65e0966000, "r--p", "[vvar_vclock]"},
		"00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/my prog (deleted)":           {0x400000, 0x452000, "r-xp", "/usr/bin/my prog (deleted)"},
		"7ffd1000-7ffd2000 rw-p 00000000 00:00 0 ":                                               {0x7ffd1000, 0x7ffd2000, "rw-p", ""},
		"7ffd1000-7ffd2000 rw-p 00000000 00:00 0":                                                {0x7ffd1000, 0x7ffd2000, "rw-p", ""},
	} {
		got, ok := ParseMapsLine(line)
		assert.True(t, ok, line)
		assert.Equal(t, want, got, line)
	}
	for _, line := range []string{"", "7ffd1000-7ffd2000", "2000-1000 rw-p 0 00:00 0", "x-2000 rw-p 0 00:00 0", "1000-2000 rw 0 00:00 0"} {
		_, ok := ParseMapsLine(line)
		assert.False(t, ok, line)
	}
}

// vvarLine renders a [vvar]-like line of n pages at lo.
func vvarLine(lo uint64, pages int, name string) string {
	return fmt.Sprintf("%x-%x r--p 00000000 00:00 0                          %s\n", lo, lo+uint64(pages)*PageSize, name)
}

// TestLocateLayouts runs Locate on the layouts of each kernel range
// (constructed lines; only the 6.18 one was captured for real).
func TestLocateLayouts(t *testing.T) {
	const lo = 0x7fff0000
	for _, c := range []struct {
		name, release, maps string
		want                Location
		err                 error
	}{
		{"6.13+", "6.13.0", vvarLine(lo-4*PageSize, 4, "[vvar]") + vvarLine(lo, 2, "[vvar_vclock]"),
			Location{Pvclock: lo, Hyperv: lo + PageSize, Mapping: "[vvar_vclock]", Layout: "[vvar_vclock] (Linux 6.13+): pvclock page +0, hvclock page +1"}, nil},
		{"5.6-6.12", "6.12.9-generic", vvarLine(lo, 4, "[vvar]"),
			Location{Pvclock: lo + PageSize, Hyperv: lo + 2*PageSize, Mapping: "[vvar]", Layout: "[vvar] (Linux 5.6-6.12): pvclock page +1, hvclock page +2"}, nil},
		{"5.6 exactly", "5.6.0", vvarLine(lo, 4, "[vvar]"),
			Location{Pvclock: lo + PageSize, Hyperv: lo + 2*PageSize, Mapping: "[vvar]", Layout: "[vvar] (Linux 5.6-6.12): pvclock page +1, hvclock page +2"}, nil},
		{"vvar_vclock of 3 pages", "6.18.0", vvarLine(lo, 3, "[vvar_vclock]"), Location{}, ErrLayout},
		{"6.13+ without vvar_vclock", "6.14.1", vvarLine(lo, 4, "[vvar]"), Location{}, ErrNoPage},
		{"5.5: an older order", "5.5.19", vvarLine(lo, 3, "[vvar]"), Location{}, ErrLayout},
		{"4.19: an older order", "4.19.0", vvarLine(lo, 4, "[vvar]"), Location{}, ErrLayout},
		{"6.1 with a 3-page vvar", "6.1.0", vvarLine(lo, 3, "[vvar]"), Location{}, ErrLayout},
		{"no vDSO", "6.1.0", "", Location{}, ErrNoPage},
		{"unparsable release", "", vvarLine(lo, 4, "[vvar]"), Location{}, ErrLayout},
	} {
		got, err := Locate(ParseMaps(c.maps), c.release)
		if c.err != nil {
			assert.ErrorIs(t, err, c.err, c.name)
			continue
		}
		assert.NoError(t, err, c.name)
		assert.Equal(t, c.want, got, c.name)
	}
}

func TestParseRelease(t *testing.T) {
	for s, want := range map[string]Release{"6.18.44-fc-v1294": {6, 18}, "5.6": {5, 6}, "4.19.0-26-amd64": {4, 19}, "6.13-rc1": {6, 13}} {
		got, ok := ParseRelease(s)
		assert.True(t, ok, s)
		assert.Equal(t, want, got, s)
	}
	for _, s := range []string{"", "6", "a.b", "-1.2", "6.x"} {
		_, ok := ParseRelease(s)
		assert.False(t, ok, s)
	}
}
