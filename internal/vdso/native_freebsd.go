package vdso

import "golang.org/x/sys/unix"

// osClocks is what FreeBSD has for the IDs beyond CLOCK_REALTIME and
// CLOCK_MONOTONIC (see nativeClock).
var osClocks = map[ID]osClock{
	MonotonicCoarse: {native: unix.CLOCK_MONOTONIC_FAST},
	MonotonicRaw:    {why: "freebsd has no CLOCK_MONOTONIC_RAW"},
	Boottime:        {why: "freebsd's CLOCK_BOOTTIME is CLOCK_UPTIME, which stops in suspend"},
}
