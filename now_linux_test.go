// A cross-cutting suite: it proves that every reader writes nothing to
// the memory readers share: Now's assembly and Go readers (now_amd64.s,
// now.go, now_other.go's otherNow) on the latch (latch.go), on their
// fast and slow paths, and Coarse's fast path (coarse.go) on the coarse
// line.
//
// The race detector's atomics fault on read-only memory inside its own
// runtime, where no Go panic can be recovered: this test runs in the
// other builds (make test runs it natively, purego and under qemu).

//go:build linux && !race

package schedclock

import (
	"runtime"
	"runtime/debug"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestReadersWriteNothing runs every reader path on a Clock whose latch
// and coarse line lie in a page made read-only: a store to them faults,
// and the fault is turned into a panic the test catches. Readers share
// those lines with every other core; since they never write them, a
// read costs no cache-line transfer except after the writer's
// publication (once per refresh period, or per switch).
func TestReadersWriteNothing(t *testing.T) {
	f := &FakeCounter{}
	f.Set(1000)
	lines := map[string]Source{"fake": f.Source("fake", 64, 1e9), "portable": Portable()}
	if hw, ok := hwSource(t); ok {
		lines["hardware"] = hw
	}
	for name, src := range lines {
		t.Run(name, func(t *testing.T) {
			c, err := New(src)
			require.NoError(t, err)
			defer c.Close()
			c.Coarse() // its value is set before the page becomes read-only
			readers := map[string]func() int64{
				"Now": c.nanos, "now": c.now, "otherNow": func() int64 { return otherNow(c) }, "Coarse": func() int64 { return int64(c.Coarse()) },
			}
			for _, far := range []bool{false, true} {
				if far {
					// An epoch far behind: the slow path (tscSlow, 128 bits).
					c.st.mu.Lock()
					ln := c.st.cur
					ln.epochCyc -= ln.conv.overflowFrom() * 3
					c.publishLocked(ln)
					c.unlock()
				}
				// Coarse's fast path is what must write nothing; its slow
				// path stores once per tick by design. So the copy must hold
				// a value the ticker has not cleared yet: copy again until
				// it does (a tick is 1 ms; a copy takes microseconds).
				// Where Coarse follows the kernel's ticks, the copy's value
				// must also be current for the kernel's last update (a tick
				// every 1-10 ms): a Coarse that found the kernel ticked
				// between the copy and the read goes its slow way, and is
				// read again from a fresh copy.
				var ro readOnlyClock
				fresh := func() {
					ro = readOnlyCopy(t, c)
					for tries := 0; ro.clock.coarse.current() == 0; tries++ {
						require.Less(t, tries, 1000, "the coarse value was cleared or outdated before every copy")
						ro.release()
						c.Coarse()
						ro = readOnlyCopy(t, c)
					}
				}
				fresh()
				for reader, read := range readers {
					want := read()
					var got int64
					var fault string
					for tries := 0; ; tries++ {
						pc := ro.clock
						r := map[string]func() int64{"Now": pc.nanos, "now": pc.now, "otherNow": func() int64 { return otherNow(pc) }, "Coarse": func() int64 { return int64(pc.Coarse()) }}[reader]
						got, fault = readWithoutFault(r)
						if fault == "" || reader != "Coarse" || pc.coarse.current() != 0 || tries == 100 {
							break
						}
						ro.release() // the kernel ticked meanwhile: not the fast path's write
						fresh()
					}
					require.Empty(t, fault, "%s on a read-only latch (far epoch %v)", reader, far)
					if reader != "Coarse" { // the copy's coarse value is a snapshot
						assert.GreaterOrEqual(t, got, want, "%s", reader)
					}
				}
				ro.release()
			}
		})
	}
}

type readOnlyClock struct {
	clock *Clock
	page  []byte
}

// readOnlyCopy copies c byte for byte into a fresh page and makes the page
// read-only. The copy shares c's writer state (c keeps it alive).
func readOnlyCopy(t *testing.T, c *Clock) readOnlyClock {
	t.Helper()
	page, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	require.NoError(t, err)
	copy(page, unsafe.Slice((*byte)(unsafe.Pointer(c)), unsafe.Sizeof(*c)))
	require.NoError(t, unix.Mprotect(page, unix.PROT_READ))
	return readOnlyClock{clock: (*Clock)(unsafe.Pointer(&page[0])), page: page}
}

func (r readOnlyClock) release() { _ = unix.Munmap(r.page) }

// readWithoutFault calls read with faults turned into panics, and says
// what faulted, if anything.
func readWithoutFault(read func() int64) (v int64, fault string) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			fault = "fault: " + panicText(r)
		}
	}()
	v = read()
	runtime.KeepAlive(read)
	return v, ""
}

func panicText(r any) string {
	if err, ok := r.(error); ok {
		return err.Error()
	}
	return "panic"
}

// The test itself must be able to fail: a store to the read-only copy
// faults and is reported.
func TestReadOnlyCopyCatchesAStore(t *testing.T) {
	c, err := New(Portable())
	require.NoError(t, err)
	defer c.Close()
	ro := readOnlyCopy(t, c)
	defer ro.release()
	_, fault := readWithoutFault(func() int64 { ro.clock.latch.seq.Add(0); return 0 })
	assert.Contains(t, fault, "fault")
}
