package schedclock_test

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/schedclock/schedclock"
)

func Example() {
	start := schedclock.Now()
	time.Sleep(2 * time.Millisecond)
	elapsed := time.Duration(schedclock.Now() - start)
	fmt.Println(elapsed >= 2*time.Millisecond)
	// Output: true
}

// A Clock on a counter of your own: here a 32-bit counter at 1 MHz that
// the example advances by hand.
func ExampleNew() {
	var counter atomic.Uint64
	c, err := schedclock.New(schedclock.Source{
		Name: "my-counter",
		Read: counter.Load,
		Bits: 32,
		Rate: 1_000_000,
	})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	counter.Add(1500) // 1.5 ms
	fmt.Println(c.Now())
	// Output: 1500000
}

func ExampleClock_Suspend() {
	var counter atomic.Uint64
	c, _ := schedclock.New(schedclock.Source{Name: "c", Read: counter.Load, Bits: 64, Rate: 1_000_000_000})
	defer c.Close()
	counter.Store(1000)
	c.Suspend()
	counter.Store(5000) // time passing while suspended is not counted
	fmt.Println(c.Now())
	c.Resume()
	counter.Add(10)
	fmt.Println(c.Now())
	// Output:
	// 1000
	// 1010
}

func ExampleClock_Info() {
	info := schedclock.Default().Info()
	fmt.Println(info.Source != "")
	// Output: true
}
