//go:build !amd64 || !gc || purego

package schedclock

// Now returns the clock's time in nanoseconds: wait-free, allocation-free
// and never decreasing, on the conditions
// that the amd64 build's doc (and now.go) state.
// A nil *Clock reads 0, as a zero Clock does.
func (c *Clock) Now() int64 {
	if c == nil {
		return 0
	}
	return otherNow(c)
}
