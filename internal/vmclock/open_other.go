//go:build !linux

package vmclock

import (
	"runtime"

	"github.com/schedclock/schedclock/internal/format"
)

// Open finds no page outside Linux: the vmclock device is Linux's.
func Open(path string) (*Page, error) {
	return nil, format.Errorf("%w: %s has no vmclock device", ErrNoDevice, runtime.GOOS)
}
