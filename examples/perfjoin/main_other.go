//go:build !linux

package main

import (
	"fmt"
	"os"
)

// perfjoin's kernel clocks and tracers are Linux's.
func main() {
	fmt.Fprintln(os.Stderr, "perfjoin: the kernel's trace clocks are Linux's")
	os.Exit(2)
}
