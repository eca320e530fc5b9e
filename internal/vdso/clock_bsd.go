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

func (c *Clock) syscallNow() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(c.native, &ts) != nil {
		return 0
	}
	return ts.Nano()
}
