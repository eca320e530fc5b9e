package schedclock

import (
	"regexp"
	"runtime"
	"strings"
	"time"
)

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

// bubbleLabel matches the testing/synctest bubble a goroutine's header
// names ("goroutine 7 [select, synctest bubble 3]:").
var bubbleLabel = regexp.MustCompile(`synctest bubble \d+\]`)

// bubbleGoroutines counts the goroutines of the caller's testing/synctest
// bubble whose stack runs through fn (any of them where fn is ""), the
// caller included: runtime.NumGoroutine counts the whole process, where
// another test's goroutine may still be ending.
func bubbleGoroutines(fn string) int {
	own := make([]byte, 1<<10)
	bubble := bubbleLabel.Find(own[:runtime.Stack(own, false)])
	if bubble == nil {
		panic("bubbleGoroutines: not in a synctest bubble")
	}
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, string(bubble)) && strings.Contains(g, fn) {
			count++
		}
	}
	return count
}
