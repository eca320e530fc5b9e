//go:build !race

package schedclock

// stressRaceEnabled reports whether the race detector is on.
const stressRaceEnabled = false
