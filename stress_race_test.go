//go:build race

package schedclock

// stressRaceEnabled reports whether the race detector is on: it makes
// every atomic operation some ten times slower, and the stress test takes
// fewer readings by default.
const stressRaceEnabled = true
