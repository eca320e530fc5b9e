//go:build !linux

package vmclock

import (
	"fmt"
	"runtime"
)

// Open finds no page outside Linux: the vmclock device is Linux's.
func Open(path string) (*Page, error) {
	return nil, fmt.Errorf("%w: %s has no vmclock device", ErrNoDevice, runtime.GOOS)
}
