//go:build !linux

package warp

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCheckWarpNotLinux(t *testing.T) {
	r := Check(readMono, 1_000_000_000, DefaultBudget)
	assert.Equal(t, Unchecked, r.Verdict)
	assert.True(t, r.Never, "no retry can help here")
	assert.Equal(t, "cross-CPU check not run: cannot check on GOOS="+runtime.GOOS, r.String())
}
