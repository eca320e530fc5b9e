package pvclock

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHypervReaderFollowsEveryUpdate drives the Hyper-V reader on a
// synthetic TSC page the way TestGoReaderFollowsEveryUpdate drives the
// pvclock reader: an update between its loads and its re-check must make
// it read again with the new scale and offset, and a page the writer
// marks invalid (sequence 0) half-way through an update must make it
// report !ok (the vDSO then takes the system call).
func TestHypervReaderFollowsEveryUpdate(t *testing.T) {
	mem, _ := alignedPage(t)
	pg := (*HypervPage)(mem)
	published := Hyperv{Sequence: 1<<32 - 1, Scale: ^uint64(0) / 250, Offset: 1000}
	pg.Publish(published)
	h := &hooked{hooks: map[int]func(){}}

	ns, _, ok := pg.ReadWith(h.tsc)
	require.True(t, ok)
	assert.Equal(t, published.Nanoseconds(h.last), ns)

	// An update (sequence wrapping to 1, a scale 3 times larger) between
	// the loads and the re-check.
	h.hooks[h.calls+1] = func() {
		published = Hyperv{Sequence: published.Sequence + 2, Scale: published.Scale / 3, Offset: -7}
		pg.Publish(published)
	}
	ns, _, ok = pg.ReadWith(h.tsc)
	require.True(t, ok)
	assert.Equal(t, published.Nanoseconds(h.last), ns, "a reading with the scale and offset of before the update")

	// The writer marks the page invalid and is stopped half-way.
	h.hooks[h.calls+1] = func() {
		pg.sequence.Store(0)
		pg.scale.Store(published.Scale * 2)
	}
	_, _, ok = pg.ReadWith(h.tsc)
	assert.False(t, ok, "a reading from a page marked invalid")
}
