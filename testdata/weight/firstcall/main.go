// Command firstcall measures one call of the package as the first call
// a new process makes (TestFirstCallsAreCheap): it prints how long
// time.Now's first call took, the wake-up of a parked goroutine, the
// first read of a block of the binary's own mapped pages, and the call
// named by its argument, each bracketed by the CLOCK_MONOTONIC system
// call (which neither the package nor the runtime warms up).
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

// probe is initialised data, 128 KB: pages of the binary, mapped from
// its file as its code is.
var probe = [128 << 10]byte{1}

var sink byte

// blockRead measures the first read of the second 32 KB block of a 64 KB
// window of probe, once a read of the first has had the kernel map the
// window (fault-around): what a first call pays for running code in a
// block of the binary that the process has not run yet. Under shadow
// paging (a PVM guest, as the development machine is) that is an exit
// to the hypervisor, which fills the block's entries; with hardware
// nested paging, nothing.
func blockRead() int64 {
	at := uintptr(unsafe.Pointer(&probe[0]))
	window := int((at+1<<16-1)&^(1<<16-1) - at)
	sink += probe[window]
	a := monoRaw()
	sink += probe[window+32<<10]
	return monoRaw() - a
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
	block := blockRead()
	a := monoRaw()
	_ = time.Now()
	b := monoRaw()
	close(parked)
	c := monoRaw()
	<-done
	d := monoRaw()
	call()
	e := monoRaw()
	fmt.Printf("firstcall %s time.Now=%d wake=%d block=%d call=%d\n", name, b-a, c-b, block, e-d)
}
