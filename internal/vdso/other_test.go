//go:build !linux

package vdso

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
)

func resolvedBeforeMain() bool { return false }

func runtimeSeesVDSOPage() bool { return false }

// Off Linux the clocks that have no counterpart are unsupported, and the
// rest read through clock_gettime where the system has it.
func TestClocksElsewhere(t *testing.T) {
	for _, id := range []ID{Realtime, Monotonic, MonotonicRaw, MonotonicCoarse, Boottime} {
		c, err := Open(id)
		switch runtime.GOOS {
		case "darwin", "freebsd":
			if err != nil {
				assert.ErrorIs(t, err, ErrUnsupported, id.String())
				continue
			}
			assert.Positive(t, c.Now(), id.String())
		default:
			assert.ErrorIs(t, err, ErrUnsupported, id.String())
		}
	}
}
