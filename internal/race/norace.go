//go:build !race

package race

// Enabled reports whether this build runs under the race detector.
const Enabled = false
