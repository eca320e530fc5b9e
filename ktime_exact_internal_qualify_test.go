package schedclock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/pvclock"
	"github.com/schedclock/schedclock/internal/testenv"
)

// TestKernelConversionPivotLive: on this machine's kernel, every update
// seen after its predecessor that changed mult (NTP moves it by ±1 at
// many updates while it corrects) pivots by the arithmetic (Δmult
// divides the two conversions' difference), and its pivot lies at or
// after cycle_last and before the update was seen. It watches the
// kernel's updates for 500 ms: the qualification layer
// (TestKernelPivot proves the arithmetic on synthetic conversions).
func TestKernelConversionPivotLive(t *testing.T) {
	testenv.Qualify(t)
	kc := kernelConvsOnce.get()
	if kc == nil {
		t.Skip("no vDSO time data here, or no conversion where this package looks")
	}
	k := struct {
		td     *pvclock.TimeData
		layout pvclock.Layout
	}{kc.td, kc.layout}
	var prev pvclock.Conv
	pairs, pivoted := 0, 0
	for deadline := time.Now().Add(500 * time.Millisecond); time.Now().Before(deadline); {
		cur, ok := k.td.Load(k.layout)
		if !ok || cur.Seq == prev.Seq {
			continue
		}
		if prev.Seq+2 == cur.Seq {
			pairs++
			p := kernelPivot(&prev, &cur)
			assert.GreaterOrEqual(t, p, cur.CycleLast)
			if p != cur.CycleLast {
				pivoted++
			} else {
				assert.Equal(t, prev.Mult, cur.Mult, "mult changed, yet no pivot: %+v after %+v", cur, prev)
			}
			if cur.Mode == pvclock.ModePvclock && pvclock.Supported {
				if pg, err := foundParavirt(); err == nil && pg.pv != nil {
					ns, _, ok := pvclock.Read(pg.pv)
					if ok {
						assert.Less(t, p, ns, "the pivot is a counter value before the update was seen")
					}
				}
			}
		}
		prev = cur
	}
	t.Logf("%d consecutive updates, %d pivoted by the arithmetic", pairs, pivoted)
	require.NotZero(t, pairs)
}
