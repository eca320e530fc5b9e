//go:build !linux

package adjtimex

import (
	"runtime"

	"github.com/schedclock/schedclock/internal/format"
)

// Read finds no adjtimex outside Linux.
func Read() (Reading, error) {
	return Reading{}, format.Errorf("%w on %s", ErrUnsupported, runtime.GOOS)
}
