package schedclock_test

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The package's documentation as go doc shows it (doc.go and every
// exported doc comment).

// goDoc returns go doc's output for the package with args.
func goDoc(t *testing.T, args ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the go command")
	}
	gocmd, err := exec.LookPath("go")
	require.NoError(t, err)
	out, err := exec.Command(gocmd, append([]string{"doc"}, append(args, ".")...)...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}

// TestDocFirstScreen: go doc of the package shows at most 50 lines
// before its index, the first screen a user reads.
func TestDocFirstScreen(t *testing.T) {
	out := goDoc(t)
	lines := strings.Split(out, "\n")
	index := len(lines)
	for i, l := range lines {
		if strings.HasPrefix(l, "func ") || strings.HasPrefix(l, "type ") || strings.HasPrefix(l, "var ") || strings.HasPrefix(l, "const ") {
			index = i
			break
		}
	}
	assert.LessOrEqual(t, index, 50, "lines of go doc before the index:\n%s", strings.Join(lines[:min(index, 60)], "\n"))
}

// TestDocNamesNoInternalPackage: go doc -all names no package under
// internal/, whose names a user can neither import nor look up.
func TestDocNamesNoInternalPackage(t *testing.T) {
	out := goDoc(t, "-all")
	entries, err := os.ReadDir("internal")
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, regexp.QuoteMeta(e.Name()))
		}
	}
	internal := regexp.MustCompile(`\binternal/|\b(` + strings.Join(names, "|") + `)\.[A-Za-z]`)
	for i, l := range strings.Split(out, "\n") {
		assert.False(t, internal.MatchString(l), "go doc -all, line %d names an internal package: %s", i+1, l)
	}
}
