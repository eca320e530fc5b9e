// Command unixsince must not compile: a Unix time is not an Instant
// (TestAUnixTimeIsNotAnInstant).
package main

import (
	"fmt"
	"time"

	"github.com/schedclock/schedclock"
)

func main() { fmt.Println(schedclock.Since(time.Now().UnixNano())) }
