package vdso_test

import (
	"fmt"

	"github.com/schedclock/schedclock/internal/vdso"
)

func ExampleOpen() {
	c, err := vdso.Open(vdso.MonotonicRaw)
	if err != nil {
		fmt.Println(err) // another OS, or a kernel without the clock
		return
	}
	start := c.Now()
	elapsed := c.Now() - start
	fmt.Println(c.ID(), elapsed >= 0)
	// Output: CLOCK_MONOTONIC_RAW true
}
