package adapt_test

import (
	"fmt"
	"time"

	"github.com/schedclock/schedclock/adapt"
	"github.com/schedclock/schedclock/schedclocktest"
)

// A deadline on the clock's Instants: Until says what is left of it.
func ExampleClock_Deadline() {
	c, m := schedclocktest.NewManualClock(nil)
	defer c.Close()
	a := adapt.On(c)
	deadline := a.Deadline(2 * time.Second)
	m.Advance(1500 * time.Millisecond)
	fmt.Println(a.Until(deadline))
	m.Advance(time.Second)
	fmt.Println(a.Until(deadline), c.Now() >= deadline)
	// Output:
	// 500ms
	// -500ms true
}

// Now and Since, as a k8s.io/utils/clock.PassiveClock consumer calls
// them, on wall time read from the clock.
func ExampleClock_Since() {
	c, m := schedclocktest.NewManualClock(nil)
	defer c.Close()
	a := adapt.On(c)
	created := a.Now()
	m.Advance(90 * time.Second)
	fmt.Println(a.Since(created), a.Now().UTC().Format(time.RFC3339))
	// Output: 1m30s 2000-01-01T00:01:30Z
}
