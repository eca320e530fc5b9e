package clockbound

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/schedclock/schedclock/internal/testenv"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// version is what the daemon writes at its k-th update: every field a
// function of k, so that a copy mixing two updates shows.
func version(k uint64) Snapshot {
	return Snapshot{
		Magic: Magic, SegSize: Size, Version: Version,
		AsOf: int64(k) * 1e9, VoidAfter: int64(k)*1e9 + 10e9,
		BoundNs: 1000 + int64(k), DisruptionMarker: k / 4, MaxDriftPPB: uint32(k % 1e6),
		Status: StatusSynchronized, DisruptionSupport: k%2 == 0,
	}
}

func consistent(s Snapshot) (k uint64, ok bool) {
	k = uint64(s.AsOf / 1e9)
	want := version(k)
	want.Generation = s.Generation
	return k, s == want
}

// TestReadersNeverSeeATornSegment: the daemon's writer hammers the
// generation seqlock, every field changing and the marker with it, while
// readers read: every copy is one whole update, the updates a reader
// sees never go back and are at least the last one completed before the
// read began (so a marker change shows at the first read after it),
// and Generation moves with every update.
func TestReadersNeverSeeATornSegment(t *testing.T) {
	g := new(Segment)
	g.Write(version(1))
	var written atomic.Uint64
	written.Store(1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for k := uint64(2); ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			g.Write(version(k))
			written.Store(k)
		}
	})
	var reads, busy atomic.Int64
	// 5,000 reads a reader, 200 of them during a write at least (tens of ms);
	// the qualification layer (and the mutants) reads for 300 ms, 5,000
	// reads during a write at least: a loaded machine that seldom runs
	// the writer and a reader at once takes longer, not fewer chances.
	// With one P they overlap only where the writer is preempted.
	deadline, minReads, minOverlaps := time.Time{}, 5000, int64(200)
	if testenv.Qualifying() {
		deadline, minReads, minOverlaps = time.Now().Add(300*time.Millisecond), 1000, 5000
	}
	if runtime.GOMAXPROCS(0) < 2 {
		minOverlaps = 0
	}
	var overlapped atomic.Int64 // reads during which a write completed
	var rg sync.WaitGroup
	for range max(runtime.GOMAXPROCS(0)-1, 1) {
		rg.Go(func() {
			var last uint64
			for n := 0; time.Now().Before(deadline) || n < minReads || overlapped.Load() < minOverlaps; n++ {
				before := written.Load()
				s, err := g.Read()
				if written.Load() != before {
					overlapped.Add(1)
				}
				if err != nil {
					assert.ErrorIs(t, err, ErrBusy)
					busy.Add(1)
					continue
				}
				k, ok := consistent(s)
				if !assert.True(t, ok, "a torn copy: %+v", s) {
					return
				}
				assert.GreaterOrEqual(t, k, before)
				assert.GreaterOrEqual(t, k, last)
				assert.Zero(t, s.Generation&1, "a copy taken during a write")
				last = k
				reads.Add(1)
			}
		})
	}
	rg.Wait()
	close(stop)
	wg.Wait()
	t.Logf("%d consistent reads, %d refused as busy, %d during an update, over %d updates", reads.Load(), busy.Load(), overlapped.Load(), written.Load())
	require.Positive(t, reads.Load())
}

// TestGenerationWrapsPastZero: the daemon's generation skips 0 when it
// wraps (0 means "not initialised"), and the reader follows it.
func TestGenerationWrapsPastZero(t *testing.T) {
	g := new(Segment)
	g.SetVersionGeneration(Version, 65534)
	g.Write(version(3))
	gen, err := g.Generation()
	require.NoError(t, err)
	assert.Equal(t, uint16(2), gen)
	s, err := g.Read()
	require.NoError(t, err)
	assert.Equal(t, uint16(2), s.Generation)
}

// TestAWriterStoppedHalfWayIsNeverRead: a daemon stopped inside an update
// (generation odd, half the body new) leaves readers with ErrBusy; a
// wiped segment (version or generation 0) with ErrNotReady; never a
// copy.
func TestAWriterStoppedHalfWayIsNeverRead(t *testing.T) {
	g := new(Segment)
	g.Write(version(5))
	g.SetVersionGeneration(Version, 7)
	half := version(5)
	half.BoundNs = version(6).BoundNs
	g.Tear(half)
	_, err := g.Read()
	assert.ErrorIs(t, err, ErrBusy)
	g.SetVersionGeneration(0, 0)
	_, err = g.Read()
	assert.ErrorIs(t, err, ErrNotReady)
	g.SetVersionGeneration(Version, 0)
	_, err = g.Read()
	assert.ErrorIs(t, err, ErrNotReady)
	g.SetVersionGeneration(1, 8)
	_, err = g.Read()
	assert.ErrorIs(t, err, ErrLayout, "protocol 1")
}

// TestATruncatedSegmentFaultsIntoAnError: the daemon rewrites its file
// when it starts (File::create truncates it to 0 bytes first); a reader
// whose mapping then points past the file's end faults, and the fault
// is reported as ErrNoSegment, not the runtime's fatal error.
func TestATruncatedSegmentFaultsIntoAnError(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the segment is mapped on Linux only")
	}
	path := filepath.Join(t.TempDir(), "shm0")
	raw := make([]byte, Size)
	s := version(9)
	s.Generation = 10
	Encode(raw, s)
	require.NoError(t, os.WriteFile(path, raw, 0o644))
	g, err := Open(path)
	require.NoError(t, err)
	got, err := g.Read()
	require.NoError(t, err)
	k, ok := consistent(got)
	assert.True(t, ok)
	assert.Equal(t, uint64(9), k)
	require.NoError(t, os.Truncate(path, 0))
	_, err = g.Read()
	assert.ErrorIs(t, err, ErrNoSegment)
	_, err = g.Generation()
	assert.ErrorIs(t, err, ErrNoSegment)
}

// TestOpenRefusesWhatIsNoSegment: no file, a file shorter than its
// header says, another protocol, a wiped segment: an error, no mapping.
func TestOpenRefusesWhatIsNoSegment(t *testing.T) {
	if runtime.GOOS != "linux" {
		_, err := Open(DefaultPath)
		assert.ErrorIs(t, err, ErrNoSegment)
		return
	}
	littleEndian(t)
	dir := t.TempDir()
	_, err := Open(filepath.Join(dir, "missing"))
	assert.ErrorIs(t, err, ErrNoSegment)
	for name, want := range map[string]error{
		"clockbound-v1.bin":       ErrLayout,
		"clockbound-v2-wiped.bin": ErrNotReady,
	} {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, fixture(t, name), 0o644))
		_, err := Open(path)
		assert.ErrorIs(t, err, want, name)
	}
	short := filepath.Join(dir, "short")
	require.NoError(t, os.WriteFile(short, fixture(t, "clockbound-v2-synchronized.bin")[:40], 0o644))
	_, err = Open(short)
	assert.True(t, errors.Is(err, ErrLayout), "%v", err)
	tiny := filepath.Join(dir, "tiny")
	require.NoError(t, os.WriteFile(tiny, []byte{1, 2, 3}, 0o644))
	_, err = Open(tiny)
	assert.ErrorIs(t, err, ErrLayout)
}

// TestFromBytesRefusesShortOrUnaligned: as vmclock's.
func TestFromBytesRefusesShortOrUnaligned(t *testing.T) {
	words := make([]uint64, Size/8+1)
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
	_, err := FromBytes(buf[:Size-1])
	assert.ErrorIs(t, err, ErrLayout)
	_, err = FromBytes(buf[4 : Size+4])
	assert.ErrorIs(t, err, ErrLayout)
	_, err = FromBytes(buf[:Size])
	assert.NoError(t, err)
}
