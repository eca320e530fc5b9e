package schedclock_test

import "time"

// bubbleSleep lets d of a testing/synctest bubble's fake time pass, as
// a sleep does there: at once in real time, once every goroutine of
// the bubble waits. It panics outside a bubble, where it would sleep for
// real: the fast layer sleeps no real time, and a helper that does so
// only inside bubbles says so by calling this.
func bubbleSleep(d time.Duration) {
	if now := time.Now(); now != now.Round(0) { // a bubble's time carries no monotonic reading
		panic("bubbleSleep outside a testing/synctest bubble: that would be a real sleep")
	}
	time.Sleep(d)
}
