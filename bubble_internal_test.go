package schedclock

import "time"

// bubbleSleep lets d of a testing/synctest bubble's fake time pass, as
// a sleep does there: at once in real time, once every goroutine of
// the bubble waits. It panics outside a bubble, where it would sleep for
// real: the fast layer sleeps no real time.
func bubbleSleep(d time.Duration) {
	if !inSynctestBubble() {
		panic("bubbleSleep outside a testing/synctest bubble: that would be a real sleep")
	}
	time.Sleep(d)
}
