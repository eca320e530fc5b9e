//go:build !linux

package schedclock

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCheckWarpNotLinux(t *testing.T) {
	r := checkWarp(readMono, 1_000_000_000, warpCheckBudget)
	assert.Equal(t, warpUnchecked, r.Verdict)
	assert.Equal(t, "cross-CPU check not run: cannot check on GOOS="+runtime.GOOS, r.String())
	assert.NoError(t, r.untrusted("tsc"))
}
