//go:build !linux

package pvclock

import (
	"fmt"
	"runtime"
)

// Maps reports that only Linux maps the clock pages this package reads.
func Maps() ([]Mapping, error) {
	return nil, fmt.Errorf("%w: %s maps no vDSO clock pages that this package knows", ErrNoPage, runtime.GOOS)
}

// KernelRelease is "" outside Linux.
func KernelRelease() string { return "" }

// ProbePvclock finds no page outside Linux.
func ProbePvclock(addr uint64) (*Page, Pvclock, error) {
	return nil, Pvclock{}, fmt.Errorf("%w: not Linux", ErrNoPage)
}

// ProbeHyperv finds no page outside Linux.
func ProbeHyperv(addr uint64) (*HypervPage, Hyperv, error) {
	return nil, Hyperv{}, fmt.Errorf("%w: not Linux", ErrNoPage)
}

// ProbeTimeData finds no vDSO time data outside Linux.
func ProbeTimeData([]Mapping) (td *TimeData, coarse int, err error) {
	return nil, 0, fmt.Errorf("%w: not Linux", ErrNoPage)
}
