package perfclock

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Open maps the first page of a dummy software event on this process
// (PERF_COUNT_SW_DUMMY, any CPU, user space only, never enabled: it
// counts nothing), which the kernel keeps updated with the clock's
// conversion. The event's descriptor is closed at once: the mapping
// keeps the event, and the page, for the life of the process.
func Open() (*Page, error) {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_DUMMY,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Bits:   unix.PerfBitDisabled | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv,
	}
	fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("perfclock: perf_event_open of a dummy event: %w", err)
	}
	defer unix.Close(fd)
	mem, err := unix.Mmap(fd, 0, unix.Getpagesize(), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("perfclock: mmap of the event's page: %w", err)
	}
	return &Page{base: unsafe.Pointer(&mem[0])}, nil
}
