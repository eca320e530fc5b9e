// Command firstcall measures one call of the package as the first call
// a new process makes (TestFirstCallsAreCheap): it prints how long
// time.Now's first call took, the wake-up of a parked goroutine, and
// the call named by its argument, each bracketed by the CLOCK_MONOTONIC
// system call (which neither the package nor the runtime warms up).
package main

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"github.com/schedclock/schedclock"
)

var firstCalls = map[string]func(){
	"Now":      func() { schedclock.Now() },
	"Since":    func() { schedclock.Since(0) },
	"Coarse":   func() { schedclock.Coarse() },
	"WallNow":  func() { schedclock.WallNow() },
	"Time":     func() { schedclock.Default().WallTime(12345) },
	"Raw":      func() { _, _ = schedclock.Raw() },
	"Boottime": func() { _, _ = schedclock.Boottime() },
	"Info":     func() { schedclock.Default().Info() },
}

func monoRaw() int64 {
	var ts syscall.Timespec
	_, _, _ = syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1 /* CLOCK_MONOTONIC */, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

func main() {
	name := os.Args[1]
	call, ok := firstCalls[name]
	if !ok {
		fmt.Printf("no first call %q\n", name)
		os.Exit(2)
	}
	parked, done := make(chan struct{}), make(chan struct{})
	go func() { <-parked; close(done) }()
	runtime.Gosched() // let it park
	monoRaw()         // the bracket's own first call
	a := monoRaw()
	_ = time.Now()
	b := monoRaw()
	close(parked)
	c := monoRaw()
	<-done
	d := monoRaw()
	call()
	e := monoRaw()
	fmt.Printf("firstcall %s time.Now=%d wake=%d call=%d\n", name, b-a, c-b, e-d)
}
