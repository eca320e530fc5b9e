//go:build !amd64 && !arm64 && !riscv64 && !ppc64le && !s390x && !loong64

package schedclock

import (
	"fmt"
	"runtime"
)

// counters: see counter.go. No counter here: the default clock stays on
// the portable source.
var counters []*counter

// hardware is Hardware here: there is no counter register this package
// reads.
func hardware() (Source, error) {
	return Source{}, fmt.Errorf("%w: no counter register is read on %s", ErrUnsupported, runtime.GOARCH)
}
