package schedclocktest_test

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/testenv"
)

// TestRefusedOutsideATest: each constructor panics, saying why, in a
// program that is not a test (testing.Testing() is false), rather than
// hand it a clock that links the testing package.
func TestRefusedOutsideATest(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program with the go command")
	}
	if testenv.Emulated() {
		t.Skip("under an emulator the go command builds for the emulated architecture, which this process cannot run without it")
	}
	gocmd, err := exec.LookPath("go")
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "outside")
	out, err := exec.Command(gocmd, "build", "-o", bin, "./testdata/outside").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, ctor := range []string{"NewManual", "NewManualClock", "NewBubbleClock"} {
		out, err := exec.Command(bin, ctor).CombinedOutput()
		assert.Error(t, err, "%s outside a test: %s", ctor, out)
		assert.Contains(t, string(out), "panic: schedclocktest."+ctor+" called outside a test", ctor)
	}
}
