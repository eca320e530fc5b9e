// Command perfjoin makes spans that a kernel trace can be joined with:
// n times it makes a system call (getpid, by syscall.Syscall: never
// cached) between two readings of the default clock, and prints the two
// readings mapped onto a kernel clock (KernelTime), one span a line,
// after a first line "tid TID" naming the thread that made the calls.
// The first span starts at the program's first reading, which is mapped
// at once: the first KernelTime makes the default clock's choice of
// counter, and its switch, before it answers, so every later reading is
// on the counter's line. (Where the clock's counter is not one the
// kernel converts, KernelTime answers from a map paired in the
// background from its first call on: the first spans then map through
// a provisional pairing, microseconds off, and a trace would want its
// first 100 ms left out.) Recorded by perf (perf record -k
// CLOCK_MONOTONIC -e raw_syscalls:sys_enter) or ftrace (trace_clock mono
// or boot), each kernel stamp of those calls falls inside its span:
// main_test.go joins the two timelines.
//
//	perfjoin [-clock monotonic|boottime] [-n 10000]
//go:build linux

package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"runtime"
	"syscall"

	"github.com/schedclock/schedclock"
)

func main() {
	clock := flag.String("clock", "monotonic", "the kernel clock to map onto: monotonic or boottime")
	n := flag.Int("n", 10000, "how many spans")
	flag.Parse()
	k := map[string]schedclock.KernelClock{"monotonic": schedclock.KernelMonotonic, "boottime": schedclock.KernelBoottime}[*clock]
	c := schedclock.Default()
	spans := make([][2]schedclock.Instant, *n)
	runtime.LockOSThread() // one thread makes every call
	before := c.Now()      // the program's first reading
	if _, ok := c.KernelTime(k, before); k == 0 || !ok {
		fmt.Fprintf(os.Stderr, "perfjoin: no kernel clock %q here\n", *clock)
		os.Exit(2)
	}
	for i := range spans {
		syscall.Syscall(syscall.SYS_GETPID, 0, 0, 0)
		after := c.Now()
		spans[i] = [2]schedclock.Instant{before, after}
		before = c.Now()
	}
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(w, "tid %d\n", syscall.Gettid())
	for _, s := range spans {
		// Mapped after the loop: a reading's kernel time never changes
		// once it was taken, and the loop stays as tight as a traced
		// program's.
		a, _ := c.KernelTime(k, s[0])
		b, _ := c.KernelTime(k, s[1])
		fmt.Fprintf(w, "%d %d\n", a, b)
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "perfjoin:", err)
		os.Exit(1)
	}
}
