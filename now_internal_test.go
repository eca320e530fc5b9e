package schedclock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The read path (now.go, now_amd64.{go,s}, now_other.go) from inside:
// the assembly and the Go reader against each other and against lines
// published by hand. now_test.go has what the public API can show.

// TestNowPathsAgree runs the assembly reader (amd64) and the generic Go
// reader over the same clock, interleaved: they must agree, and time must
// never go backwards from one to the other.
func TestNowPathsAgree(t *testing.T) {
	hw, ok := hardwareExpected(t)
	if !ok {
		return
	}
	if hw.Rate == 0 {
		hz, _, err := measureRate(hw.Read, 20*time.Millisecond)
		require.NoError(t, err)
		hw.Rate = uint64(hz)
	}
	c, err := New(hw)
	require.NoError(t, err)
	defer c.Close()
	last := c.Now()
	for i := 0; i < 100000; i++ {
		var now int64
		if i%2 == 0 {
			now = c.Now()
		} else {
			now = c.now()
		}
		require.GreaterOrEqual(t, now, last, "iteration %d", i)
		last = now
	}

	// Counter values the fast paths refuse: below the epoch (clamped to
	// it), and far enough ahead that delta*mult overflows 64 bits.
	c.mu.Lock()
	ln := c.cur
	ln.epochCyc = hw.Read() + uint64(hw.Rate)*1000
	ln.epochNs = 1234
	c.publishLocked(ln)
	c.unlock()
	assert.Equal(t, int64(1234), c.Now())
	assert.Equal(t, int64(1234), c.now())

	c.mu.Lock()
	ln.epochCyc = hw.Read() - ln.conv.overflowFrom()*3
	c.publishLocked(ln)
	c.unlock()
	before, _ := ln.at(hw.Read())
	got, gotGeneric := c.Now(), c.now()
	after, _ := ln.at(hw.Read())
	assert.GreaterOrEqual(t, got, before)
	assert.GreaterOrEqual(t, gotGeneric, got)
	assert.GreaterOrEqual(t, after, gotGeneric)
	assert.Greater(t, before, int64(ln.conv.nanos(ln.conv.overflowFrom())), "the 128-bit path must be taken")
}
