//go:build !linux

package adjtimex

import (
	"fmt"
	"runtime"
)

// Read finds no adjtimex outside Linux.
func Read() (Reading, error) {
	return Reading{}, fmt.Errorf("%w on %s", ErrUnsupported, runtime.GOOS)
}
