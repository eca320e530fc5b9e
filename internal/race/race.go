//go:build race

// Package race says whether the race detector is on. Its bookkeeping
// around every atomic access makes each one some ten times slower and
// changes the timing that the ordering and stress tests observe, so
// those tests size their runs by it.
package race

// Enabled reports whether this build runs under the race detector.
const Enabled = true
