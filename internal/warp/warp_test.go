package warp

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestWarpReportString(t *testing.T) {
	found := Report{Verdict: Found, CPUs: 8, Pairs: 7, Reads: 5000, Warps: 3,
		Before: 4, After: 0, Cycles: 3_000_000, Ns: 1_000_000, Took: 21 * time.Millisecond}
	assert.Equal(t, "cross-CPU warp: a read on CPU 0 was 3000000 cycles (1 ms) behind an earlier read on CPU 4; "+
		"3 of 5000 cross-CPU reads went backwards (8 CPUs, 7 pairs, 21ms)", found.String())

	same := Report{Verdict: Found, CPUs: 2, Pairs: 1, Reads: 10, Warps: 1, Before: 1, After: 1, Cycles: 7}
	assert.Contains(t, same.String(), "a read on CPU 1 was 7 cycles behind an earlier read on the same CPU")

	ok := Report{Verdict: None, CPUs: 2, Pairs: 1, Reads: 40000, Took: 10*time.Millisecond + 300*time.Microsecond}
	assert.Equal(t, "no warp across 2 CPUs (1 pair, 40000 cross-CPU reads, 10.3ms)", ok.String())
	assert.True(t, ok.OK())
	assert.False(t, found.OK())
	assert.False(t, Report{}.OK())
}

// monoStart anchors readMono.
var monoStart = time.Now()

// readMono reads Go's monotonic clock in ns: a counter the kernel keeps in
// step across CPUs, for the tests to fake others on.
func readMono() uint64 { return uint64(time.Since(monoStart)) }
