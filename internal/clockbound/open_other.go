//go:build !linux

package clockbound

import (
	"fmt"
	"runtime"
)

// Open finds no segment outside Linux: the daemon is Linux's.
func Open(path string) (*Segment, error) {
	return nil, fmt.Errorf("%w: ClockBound does not run on %s", ErrNoSegment, runtime.GOOS)
}
