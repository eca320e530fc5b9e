package schedclock

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/osthread"
	"github.com/schedclock/schedclock/internal/testenv"
)

// TestDefaultClockFallsBackOnAWarp wires the check into the default
// clock's start-up: a counter whose rate must be measured, 1 ms ahead on
// one CPU, is never adopted; a counter that agrees across CPUs is.
// Threads on two real CPUs and the set-up's real waits: the
// qualification layer.
func TestDefaultClockFallsBackOnAWarp(t *testing.T) {
	testenv.Qualify(t)
	cpus := needTwoCPUs(t)
	warped := realtime1GHz()
	clean := warped.Read
	warped.Read = func() uint64 {
		if osthread.CurrentCPU() == cpus[1] {
			return clean() + 1_000_000
		}
		return clean()
	}
	for _, tc := range []struct {
		hw    Source
		adopt bool
	}{{warped, false}, {realtime1GHz(), true}} {
		c := defaultLike(t, tc.hw)
		c.st.mu.Lock()
		c.st.policy.trustPending = true
		c.unlock()
		time.Sleep(firstMeasurement + 30*time.Millisecond)
		assert.Equal(t, "portable", c.Info().Source, "adopted before the checks passed")
		c.checkTrust()
		in := c.Info()
		t.Logf("cross-CPU: %s", in.Evidence.CrossCPU)
		if tc.adopt {
			// Adopted whether the check found no warp or could not run
			// (a machine too busy for two threads to run at once).
			require.Eventually(t, func() bool { return c.Info().Source == "hw" }, 2*time.Second, time.Millisecond)
			assert.Regexp(t, "no warp|not run", c.Info().Evidence.CrossCPU)
			continue
		}
		if strings.Contains(in.Evidence.CrossCPU, "not run") {
			t.Logf("the check could not run here (%s): nothing to fall back from", in.Evidence.CrossCPU)
			continue
		}
		assert.Contains(t, in.Evidence.Rejected, "behind")
		time.Sleep(firstMeasurement + 30*time.Millisecond)
		assert.Equal(t, "portable", c.Info().Source)
		c.st.mu.Lock()
		assert.Nil(t, c.st.track, "calibration of a warped counter must end")
		c.unlock()
	}
}
