//go:build !linux

package perfclock

// Open has no perf events to map outside Linux.
func Open() (*Page, error) { return nil, ErrNoPage }
