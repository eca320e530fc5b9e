package testcounter

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadersReadOneCounter: on one thread, an unfenced read between two
// serialized ones lies between them, and the counter moves.
func TestReadersReadOneCounter(t *testing.T) {
	if !Supported {
		assert.Zero(t, ReadUnfenced())
		assert.Zero(t, ReadSerialized())
		t.Skip("no counter assembly in this build")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	first := ReadSerialized()
	for i := 0; i < 10_000; i++ {
		before := ReadSerialized()
		v := ReadUnfenced()
		after := ReadSerialized()
		require.LessOrEqual(t, before, v, "read %d", i)
		require.LessOrEqual(t, v, after, "read %d", i)
	}
	assert.Greater(t, ReadSerialized(), first, "the counter did not move in 30,000 reads")
}
