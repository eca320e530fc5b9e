//go:build darwin || freebsd

package vdso

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

func defaultEntry() (uintptr, string) { return 0, "" }

func openClock(id ID, _ func() (uintptr, string)) (*Clock, error) {
	native, why := nativeClock(id)
	if why != "" {
		return nil, fmt.Errorf("%w: %v: %s", ErrUnsupported, id, why)
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(native, &ts); err != nil {
		return nil, fmt.Errorf("%w: %v: clock_gettime: %v", ErrUnsupported, id, err)
	}
	path := "system call"
	if runtime.GOOS == "darwin" {
		path = "libc clock_gettime" // x/sys calls libSystem on darwin
	}
	return &Clock{native: native, id: id, path: path}, nil
}

// osClock is the OS's clock for an ID (native), or why it has none.
type osClock struct {
	native int32
	why    string
}

// nativeClock maps an ID to the OS's clock of the same meaning, or says
// why there is none: CLOCK_REALTIME and CLOCK_MONOTONIC are the same
// everywhere, the rest is the OS's osClocks.
func nativeClock(id ID) (int32, string) {
	switch id {
	case Realtime:
		return unix.CLOCK_REALTIME, ""
	case Monotonic:
		return unix.CLOCK_MONOTONIC, ""
	}
	if c, ok := osClocks[id]; ok {
		return c.native, c.why
	}
	return 0, "unknown clock"
}

func (c *Clock) syscallNow() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(c.native, &ts) != nil {
		return 0
	}
	return ts.Nano()
}
