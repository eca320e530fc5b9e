// Package format writes measured quantities and times for people. The
// library's diagnostics (the default clock's verdict on a counter, the
// cross-CPU check's report, the times Info's messages carry) and the
// programs beside it print durations the same way, so they share one
// writer.
package format

import "fmt"

// Ns writes a duration given in (fractional) nanoseconds with a unit
// that keeps three significant digits: "12 ns", "1.5 µs", "2.5 ms",
// "1.6 s".
func Ns(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.3g s", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.3g ms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.3g µs", ns/1e3)
	}
	return fmt.Sprintf("%.3g ns", ns)
}
