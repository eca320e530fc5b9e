// Command outside calls one of schedclocktest's constructors, named by
// its argument, outside a test: each must refuse (TestRefusedOutsideATest).
package main

import (
	"fmt"
	"os"

	"github.com/schedclock/schedclock/schedclocktest"
)

func main() {
	switch os.Args[1] {
	case "NewManual":
		m, err := schedclocktest.NewManual(1e9, 64)
		fmt.Println(m, err)
	case "NewManualClock":
		c, m := schedclocktest.NewManualClock(nil)
		fmt.Println(c.Now(), m)
	case "NewBubbleClock":
		fmt.Println(schedclocktest.NewBubbleClock(nil).Now())
	}
}
