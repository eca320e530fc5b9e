package perfclock

import (
	"errors"
	"sync/atomic"
	"unsafe"
)

// ErrBusy says the kernel kept the page's lock moving (or odd) through
// every try: a writer stuck half-way, which no kernel does.
var ErrBusy = errors.New("perfclock: the page's lock never settled")

// Page is a mapped perf_event_mmap_page, read under its lock. Its
// methods never write to it.
type Page struct {
	base unsafe.Pointer // the mapping's first byte; nil for none
}

// Read takes a consistent copy of the page's header (the lock even and
// unchanged across the copy, tools/perf/util/tsc.c's
// perf_read_tsc_conversion) and parses it.
func (p *Page) Read() (Conversion, error) {
	if p == nil || p.base == nil {
		return Conversion{}, ErrNoPage
	}
	lock := (*uint32)(unsafe.Add(p.base, offLock))
	var words [HeaderLen / 8]uint64
	for range 10000 {
		seq := atomic.LoadUint32(lock)
		for i := range words {
			words[i] = atomic.LoadUint64((*uint64)(unsafe.Add(p.base, i*8)))
		}
		if seq&1 == 0 && atomic.LoadUint32(lock) == seq {
			return Parse(unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), HeaderLen))
		}
	}
	return Conversion{}, ErrBusy
}

// ErrNoPage says there is no page to read: this system has no perf
// events to map, or Open failed.
var ErrNoPage = errors.New("perfclock: no perf event page here")
