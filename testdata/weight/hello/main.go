// Command hello is a hello world without the package: the baseline of
// TestWeight's size comparison.
package main

import "fmt"

func main() { fmt.Println("hello", 1) }
