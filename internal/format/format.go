// Package format writes measured quantities and times for people. The
// library's diagnostics (the default clock's verdict on a counter, the
// cross-CPU check's report, the times Info's messages carry) and the
// programs beside it print durations the same way, so they share one
// writer. Its Sprintf and Errorf write the library's messages in place
// of fmt's.
package format

// Ns writes a duration given in (fractional) nanoseconds with a unit
// that keeps three significant digits: "12 ns", "1.5 µs", "2.5 ms",
// "1.6 s".
func Ns(ns float64) string {
	switch {
	case ns >= 1e9:
		return Sprintf("%.3g s", ns/1e9)
	case ns >= 1e6:
		return Sprintf("%.3g ms", ns/1e6)
	case ns >= 1e3:
		return Sprintf("%.3g µs", ns/1e3)
	}
	return Sprintf("%.3g ns", ns)
}
