package pvclock

import (
	"encoding/binary"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// realTimeData is the vDSO time data captured on the development machine
// (testdata/README.md), with CLOCK_MONOTONIC_COARSE's base at 136.
func realTimeData(t testing.TB) (b []byte, sec, nsec uint64) {
	b, err := os.ReadFile("testdata/vdso-time-data-firecracker-6.18.bin")
	require.NoError(t, err)
	require.Len(t, b, TimeDataSize)
	return b, binary.NativeEndian.Uint64(b[136:]), binary.NativeEndian.Uint64(b[144:])
}

func TestFindCoarse(t *testing.T) {
	b, sec, nsec := realTimeData(t)
	assert.True(t, FindCoarse(b, sec, nsec), "the captured page holds its coarse time")
	assert.False(t, FindCoarse(b, sec, nsec+1), "another time")
	assert.False(t, FindCoarse(b, sec+1, nsec), "another second")
	odd := append([]byte(nil), b...)
	binary.NativeEndian.PutUint32(odd, binary.NativeEndian.Uint32(odd)|1)
	assert.False(t, FindCoarse(odd, sec, nsec), "a page in the middle of an update")
	assert.False(t, FindCoarse(b[:16], sec, nsec), "too short to hold a base")
	assert.False(t, FindCoarse(nil, 0, 0))
	// The pair must lie past the head (seq, mode, cycle_last): a page
	// whose head happens to read as the time is not the time data.
	head := make([]byte, 64)
	binary.NativeEndian.PutUint64(head[0:], 2)
	binary.NativeEndian.PutUint64(head[8:], 7)
	binary.NativeEndian.PutUint64(head[16:], 9)
	assert.False(t, FindCoarse(head, 2, 7))
	assert.False(t, FindCoarse(head, 7, 9))
	assert.True(t, FindCoarse(head, 9, 0), "the pair at 16 is past the head")
}

func TestStampOfNilIsZero(t *testing.T) {
	var td *TimeData
	assert.Zero(t, td.Stamp())
}

// The stamp folds both the sequence count and the counter value: each
// changes it.
func TestStampFoldsSeqAndCounter(t *testing.T) {
	var td TimeData
	td.seq.Store(2)
	td.cycleLast.Store(100)
	s := td.Stamp()
	td.seq.Store(4)
	assert.NotEqual(t, s, td.Stamp(), "a new sequence count")
	td.seq.Store(2)
	assert.Equal(t, s, td.Stamp())
	td.cycleLast.Store(101)
	assert.NotEqual(t, s, td.Stamp(), "a new counter value")
}

func FuzzTimeData(f *testing.F) {
	b, sec, nsec := realTimeData(f)
	f.Add(b, sec, nsec)
	f.Add(b[:64], sec, nsec)
	f.Fuzz(func(t *testing.T, b []byte, sec, nsec uint64) {
		found := FindCoarse(b, sec, nsec)
		if !found {
			return
		}
		// What it accepts: an even count and the pair, aligned, past
		// the head.
		require.GreaterOrEqual(t, len(b), 32)
		require.Zero(t, binary.NativeEndian.Uint32(b)&1)
		at := -1
		for off := 16; off+16 <= len(b); off += 8 {
			if binary.NativeEndian.Uint64(b[off:]) == sec && binary.NativeEndian.Uint64(b[off+8:]) == nsec {
				at = off
				break
			}
		}
		require.NotEqual(t, -1, at)
	})
}
