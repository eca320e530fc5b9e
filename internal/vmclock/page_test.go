package vmclock

import (
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

// version is the page the writer publishes as its k-th write: every
// field a function of k, so that a copy mixing two writes shows.
func version(k uint64) Snapshot {
	return Snapshot{
		Magic: Magic, Size: Size, Version: Version, CounterID: CounterX86TSC, TimeType: TimeUTC,
		DisruptionMarker: k / 4, // a disruption every fourth write
		Flags:            FlagPeriodMaxErrValid | FlagTimeMaxErrValid | FlagVMGenCounter,
		ClockStatus:      StatusSynchronized, PeriodShift: 29,
		CounterValue:   k * 1_000_000,
		Period:         0x89705F4136B4A597,
		PeriodMaxError: k,
		TimeSec:        1_798_761_600 + k,
		TimeFrac:       k << 40,
		TimeMaxErrorNs: 1000 + k,
		VMGeneration:   k / 8,
	}
}

// consistent says whether s is one whole version, and which.
func consistent(s Snapshot) (k uint64, ok bool) {
	k = s.TimeSec - 1_798_761_600
	want := version(k)
	want.Seq = s.Seq
	return k, s == want
}

// TestReadersNeverSeeATornPage: a writer goroutine rewrites the page as
// fast as it can, every field changing and the markers with them, while
// readers on the other Ps read it: every copy Read returns is one whole
// version with its counter read inside the window, Markers returns a
// pair from one version, the versions a reader sees never go back, and
// a reader sees a new marker at its first read after the write that
// changed it (the version it reads is at least the one whose write
// completed before it began).
func TestReadersNeverSeeATornPage(t *testing.T) {
	p := new(Page)
	p.Write(version(0))
	var written atomic.Uint64 // the last version whose write completed
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for k := uint64(1); ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			p.Write(version(k))
			written.Store(k)
		}
	})
	readers := max(runtime.GOMAXPROCS(0)-1, 1)
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
	for range readers {
		rg.Go(func() {
			var last uint64
			for n := 0; time.Now().Before(deadline) || n < minReads || overlapped.Load() < minOverlaps; n++ {
				before := written.Load()
				s, count, err := p.Read(func() uint64 { return written.Load() })
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
				assert.GreaterOrEqual(t, k, before, "a version older than the last write completed before the read")
				assert.GreaterOrEqual(t, k, last, "the versions a reader sees went back")
				assert.True(t, count+1 >= k && count <= k, "the counter (%d) was read outside version %d's window", count, k)
				last = k
				marker, gen, err := p.Markers()
				if err == nil {
					assert.Equal(t, gen, marker/2, "markers from two versions: %d, %d", marker, gen)
				}
				reads.Add(1)
			}
		})
	}
	rg.Wait()
	close(stop)
	wg.Wait()
	t.Logf("%d consistent reads, %d refused as busy, %d during a write, over %d writes", reads.Load(), busy.Load(), overlapped.Load(), written.Load())
	require.Positive(t, reads.Load())
}

// TestAWriterStoppedHalfWayIsNeverRead: a writer stopped inside a write
// (seq_count odd, half the fields new) leaves every reader with
// ErrBusy, never a copy; once it finishes, the new version reads whole.
func TestAWriterStoppedHalfWayIsNeverRead(t *testing.T) {
	p := new(Page)
	p.Write(version(10))
	p.SetSeq(7)
	half := version(10)
	half.TimeSec, half.DisruptionMarker = version(11).TimeSec, version(11).DisruptionMarker
	p.Tear(half)
	_, _, err := p.Read(nil)
	assert.ErrorIs(t, err, ErrBusy)
	_, _, err = p.Markers()
	assert.ErrorIs(t, err, ErrBusy)
	p.Write(version(11))
	s, _, err := p.Read(nil)
	require.NoError(t, err)
	k, ok := consistent(s)
	assert.True(t, ok)
	assert.Equal(t, uint64(11), k)
}

// TestFromBytesRefusesShortOrUnaligned: a mapping too short to hold the
// structure, or not 8-aligned, is refused, never overlaid.
func TestFromBytesRefusesShortOrUnaligned(t *testing.T) {
	words := make([]uint64, Size/8+1)
	buf := unsafeBytes(words)
	_, err := FromBytes(buf[:Size-1])
	assert.ErrorIs(t, err, ErrLayout)
	_, err = FromBytes(buf[1 : Size+1])
	assert.ErrorIs(t, err, ErrLayout)
	_, err = FromBytes(buf[:Size])
	assert.NoError(t, err)
}

// TestOpenWithoutADevice: where there is no device, Open says so with
// ErrNoDevice (this machine has none; a path that cannot exist stands in
// where one does).
func TestOpenWithoutADevice(t *testing.T) {
	_, err := Open("/nonexistent/vmclock0")
	assert.ErrorIs(t, err, ErrNoDevice)
}

func unsafeBytes(words []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
}
