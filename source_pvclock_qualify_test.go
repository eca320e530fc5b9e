package schedclock

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/kernel"
	"github.com/schedclock/schedclock/internal/testenv"
)

// TestParavirtOnKVMClock is TestParavirtHere on a guest whose kernel
// offers kvm-clock but may run on another clocksource: the kernel runs
// on kvm-clock for the test (and on its own again after it), the page is
// found afresh (foundParavirt keeps what the process found at its first
// look), and Paravirt's Source on it gives the page's nanoseconds, which
// CLOCK_MONOTONIC_RAW follows to within the brackets of the offset's
// measure.
func TestParavirtOnKVMClock(t *testing.T) {
	testenv.Qualify(t)
	testenv.SwitchClocksource(t, "kvm-clock")
	p, err := findParavirt()
	require.NoError(t, err)
	require.NotNil(t, p.pv, "kvm-clock's page is the pvclock page")
	assert.Empty(t, p.evidence())
	assert.True(t, kernel.ReadVerdict(kernel.ClocksourcePath, p.kind.clocksource).Keep())
	s := sharePage(t, p, rawNow)
	src, err := paravirtOn(p, alreadyShared)
	require.NoError(t, err)
	assert.Equal(t, "kvm-clock (pvclock, stable)", src.Name)
	assert.Equal(t, 63, src.Bits)
	prev := src.Read()
	for range 10000 {
		r0 := rawNow()
		v := src.Read()
		r1 := rawNow()
		require.GreaterOrEqual(t, v, prev)
		require.GreaterOrEqual(t, int64(v), r0+s.rawOffset-s.rawWidth-1, "the page behind CLOCK_MONOTONIC_RAW")
		require.LessOrEqual(t, int64(v), r1+s.rawOffset+1, "the page ahead of CLOCK_MONOTONIC_RAW")
		prev = v
	}
	assert.True(t, s.onPage(), "the Source left the page of a kernel on kvm-clock")
	t.Logf("%s: %s", src.Name, p.description())
}
