//go:build !linux && !darwin && !freebsd

package vdso

import (
	"fmt"
	"runtime"
)

func defaultEntry() (uintptr, string) { return 0, "" }

func openClock(id ID, _ func() (uintptr, string)) (*Clock, error) {
	return nil, fmt.Errorf("%w: %v: no clock_gettime on %s", ErrUnsupported, id, runtime.GOOS)
}

func (c *Clock) syscallNow() int64 { return 0 }
