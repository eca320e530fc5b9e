//go:build !linux

package clockbound

import (
	"runtime"

	"github.com/schedclock/schedclock/internal/format"
)

// Open finds no segment outside Linux: the daemon is Linux's.
func Open(path string) (*Segment, error) {
	return nil, format.Errorf("%w: ClockBound does not run on %s", ErrNoSegment, runtime.GOOS)
}
