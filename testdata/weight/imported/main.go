// Command imported imports the package and never calls it: what package
// initialisation costs (TestImportDoesNothing). It prints how many
// goroutines run at main's start.
package main

import (
	"fmt"
	"runtime"

	_ "github.com/schedclock/schedclock"
)

func main() { fmt.Println("goroutines", runtime.NumGoroutine()) }
