package vdso

import (
	"errors"
	"fmt"
	"sync"
)

// ID names a clock. The values are Linux's clock ids, the ones the vDSO
// and clock_gettime(2) take there; elsewhere Open maps an ID to the
// system's own clock of the same meaning or reports ErrUnsupported.
type ID int32

const (
	Realtime        ID = 0 // CLOCK_REALTIME: wall time, stepped and slewed
	Monotonic       ID = 1 // CLOCK_MONOTONIC: slewed by NTP, stops in suspend
	MonotonicRaw    ID = 4 // CLOCK_MONOTONIC_RAW: the unsteered counter, stops in suspend
	MonotonicCoarse ID = 6 // CLOCK_MONOTONIC_COARSE: CLOCK_MONOTONIC as of the last tick
	Boottime        ID = 7 // CLOCK_BOOTTIME: CLOCK_MONOTONIC plus the time spent in suspend
)

// idNames are the known IDs' names, Linux's; the other slots are empty.
var idNames = [...]string{Realtime: "CLOCK_REALTIME", Monotonic: "CLOCK_MONOTONIC",
	MonotonicRaw: "CLOCK_MONOTONIC_RAW", MonotonicCoarse: "CLOCK_MONOTONIC_COARSE", Boottime: "CLOCK_BOOTTIME"}

func (id ID) String() string {
	if id.known() {
		return idNames[id]
	}
	return fmt.Sprintf("clock %d", int32(id))
}

func (id ID) known() bool { return id >= 0 && int(id) < len(idNames) && idNames[id] != "" }

// ErrUnsupported: the clock does not exist on this system (another OS
// without it, a kernel that predates it, an ID this package does not
// know). It is not returned merely because there is no vDSO: then the
// clock is read through the system call.
var ErrUnsupported = errors.New("vdso: clock not supported here")

// A Clock reads one clock through the cheapest path this process has: the
// vDSO's clock_gettime where this package can call it, the system call
// otherwise. Clocks come from Open; the zero Clock is not one.
type Clock struct {
	// entry is the vDSO's clock_gettime, 0 when Now makes the system
	// call. It and native are the only fields Now reads.
	entry  uintptr
	native int32 // the id the kernel (or libc) is given
	id     ID
	path   string
}

// Now returns the clock's reading in nanoseconds. It allocates nothing
// and never blocks; safe for concurrent use.
//
// Now cannot fail: Open has read the clock through the same path. Should
// the kernel refuse later what it accepted then (no kernel does), Now
// makes the system call, and returns 0 if that fails too.
func (c *Clock) Now() int64 {
	if c.entry != 0 {
		if ns, ret := callClockGettime(c.entry, c.native); ret == 0 {
			return ns
		}
	}
	return c.syscallNow()
}

// Path says how Now reads the clock: "vDSO __vdso_clock_gettime
// (LINUX_2.6)", or "system call (...)" with the reason the vDSO is not
// used.
func (c *Clock) Path() string { return c.path }

// ID returns the clock Now reads.
func (c *Clock) ID() ID { return c.id }

// opened holds one resolution per ID: Open resolves on first use (so that
// importing the package costs nothing) and once (so that Now never looks
// anything up).
var opened [Boottime + 1]struct {
	once  sync.Once
	clock *Clock
	err   error
}

// Open returns the Clock for id, finding the vDSO on first use. The error
// wraps ErrUnsupported when the clock does not exist here; any other error
// means it exists but cannot be read (a sandbox that forbids the system
// call, on a machine without a vDSO). Every call for the same id returns
// the same Clock and error.
func Open(id ID) (*Clock, error) {
	if !id.known() {
		return nil, fmt.Errorf("%w: unknown clock id %d", ErrUnsupported, int32(id))
	}
	o := &opened[id]
	o.once.Do(func() { o.clock, o.err = openClock(id, defaultEntry) })
	return o.clock, o.err
}
