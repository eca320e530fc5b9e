//go:build !amd64 && !arm64 && !riscv64 && !ppc64le && !s390x && !loong64

package schedclock

// counters: see counter.go. No counter here: the default clock stays on
// the portable source.
var counters []*counter
