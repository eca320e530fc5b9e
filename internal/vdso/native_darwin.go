package vdso

import "golang.org/x/sys/unix"

// osClocks is what darwin has for the IDs beyond CLOCK_REALTIME and
// CLOCK_MONOTONIC (see nativeClock).
var osClocks = map[ID]osClock{
	MonotonicRaw:    {native: unix.CLOCK_MONOTONIC_RAW}, // unslewed like Linux's, but it counts the time asleep
	Boottime:        {why: "darwin has no CLOCK_BOOTTIME (its CLOCK_MONOTONIC counts sleep)"},
	MonotonicCoarse: {why: "darwin has no CLOCK_MONOTONIC_COARSE"},
}
