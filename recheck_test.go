package schedclock

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSlowCaseRechecksSeq: tscNow's slow case loads the bank in Go after
// tscNow has checked seq; a publication in between rewrites that bank, so
// the conversion must be refused and the read retried. (Without the
// re-check, TestReadersUnderBackToBackPublications sees a few torn
// readings per million, by chance: the window is a few nanoseconds.)
func TestSlowCaseRechecksSeq(t *testing.T) {
	counter := &FakeCounter{}
	c, err := New(counter.Source("fake", 64, 1_000_000_000))
	require.NoError(t, err)
	require.NoError(t, c.Close()) // only this test publishes
	ln := c.cur
	ln.epochCyc, ln.epochNs = 1000, 5000
	c.mu.Lock()
	c.publishLocked(ln)
	c.mu.Unlock()

	cyc := 1000 + ln.conv.overflowFrom()*3 // a reading for the 128-bit path
	want, ok := referenceNanos(ln, cyc)
	require.True(t, ok)
	seq := c.latch.seq.Load()
	ns, ok := c.tscSlowNanos(cyc, seq)
	assert.True(t, ok, "nothing was published: the conversion stands")
	assert.Equal(t, want, ns)

	// The writer publishes between tscNow's re-check and the loads here:
	// both banks are rewritten.
	next := ln
	next.epochCyc, next.epochNs = 77, 1<<40
	c.mu.Lock()
	c.publishLocked(next)
	c.mu.Unlock()
	_, ok = c.tscSlowNanos(cyc, seq)
	assert.False(t, ok, "a conversion with a bank rewritten after seq was checked must be refused")
}
