// Command instantok is unixsince with the explicit conversion: it
// compiles, so that TestAUnixTimeIsNotAnInstant sees the type, not some
// other error, refuse unixsince.
package main

import (
	"fmt"
	"time"

	"github.com/schedclock/schedclock"
)

func main() { fmt.Println(schedclock.Since(schedclock.Instant(time.Now().UnixNano()))) }
