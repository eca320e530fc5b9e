package perfclock

import (
	"errors"
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

func TestReadUnderTheLock(t *testing.T) {
	page := tscPage(t, 0x1e)
	buf := make([]uint64, len(page)/8) // aligned as a mapping is
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), len(page)), page)
	p := &Page{base: unsafe.Pointer(&buf[0])}
	c, err := p.Read()
	assert.NoError(t, err)
	assert.Equal(t, uint32(933688543), c.Mult)
	// An odd lock is a writer half-way: never settles.
	*(*uint32)(unsafe.Add(p.base, offLock)) = 9
	_, err = p.Read()
	assert.ErrorIs(t, err, ErrBusy)
	_, err = (*Page)(nil).Read()
	assert.ErrorIs(t, err, ErrNoPage)
}

// TestOpenHere: on Linux the page maps (perf_event_paranoid permitting)
// and says whether this kernel exports perf's clock.
func TestOpenHere(t *testing.T) {
	p, err := Open()
	if runtime.GOOS != "linux" {
		assert.ErrorIs(t, err, ErrNoPage)
		return
	}
	if err != nil {
		t.Skipf("no perf event page for this process: %v", err)
	}
	_, err = p.Read()
	if !errors.Is(err, ErrNoTimeZero) {
		assert.NoError(t, err)
	}
	t.Logf("perf's clock from the page: %v", err)
}
