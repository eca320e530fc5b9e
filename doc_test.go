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
