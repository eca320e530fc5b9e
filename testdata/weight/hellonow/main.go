// Command hellonow is hello with one call of Now: what the import adds
// to a hello world (TestWeight).
package main

import (
	"fmt"

	"github.com/schedclock/schedclock"
)

func main() { fmt.Println("hello", schedclock.Now()) }
