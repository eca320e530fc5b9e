//go:build !race

package schedclock

// raceEnabled reports whether the tests run under the race detector, whose
// bookkeeping around every atomic access changes the timing that the
// ordering tests observe.
const raceEnabled = false
