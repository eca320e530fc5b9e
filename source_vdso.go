package schedclock

import (
	"errors"
	"fmt"

	"github.com/schedclock/schedclock/internal/vdso"
)

// Raw returns CLOCK_MONOTONIC_RAW as a Source: the kernel's clock that
// counts the CPU's own time, unsteered by NTP (to correlate with
// performance counters and other raw hardware clocks), 1 GHz and 64 bits,
// its Read returning the clock's nanoseconds. It reads through the vDSO,
// at a function call's cost, where this package can call it (Linux on
// amd64 and arm64), and through the clock_gettime system call otherwise;
// the Source's Name says which path is in use and why, e.g.
// "CLOCK_MONOTONIC_RAW (vDSO __vdso_clock_gettime (LINUX_2.6))". The
// error wraps ErrUnsupported only where the clock itself does not exist.
func Raw() (Source, error) { return vdsoSource(vdso.MonotonicRaw, "CLOCK_MONOTONIC_RAW") }

// Boottime returns CLOCK_BOOTTIME as a Source, the way Raw does
// CLOCK_MONOTONIC_RAW: the monotonic clock that also counts the time the
// system was suspended, for leases, keepalives and timeouts that must
// expire across a sleep (Go's own monotonic clock stops then).
func Boottime() (Source, error) { return vdsoSource(vdso.Boottime, "CLOCK_BOOTTIME") }

func vdsoSource(id vdso.ID, name string) (Source, error) {
	c, err := vdso.Open(id)
	if err != nil {
		if errors.Is(err, vdso.ErrUnsupported) {
			return Source{}, fmt.Errorf("%w: %s: %v", ErrUnsupported, name, err)
		}
		return Source{}, fmt.Errorf("%w: %s cannot be read: %v", errUntrusted, name, err)
	}
	return Source{Name: name + " (" + c.Path() + ")", Bits: 64, Rate: 1_000_000_000, Read: func() uint64 {
		v := uint64(c.Now())
		orderAfter(v) // the latch's re-check of seq must follow the read
		return v
	}}, nil
}
