package vdso

import "golang.org/x/sys/unix"

// nativeClock maps an ID to darwin's clock of the same meaning, or says
// why there is none.
func nativeClock(id ID) (int32, string) {
	switch id {
	case Realtime:
		return unix.CLOCK_REALTIME, ""
	case Monotonic:
		return unix.CLOCK_MONOTONIC, ""
	case MonotonicRaw:
		// Unslewed like Linux's, but it counts the time asleep.
		return unix.CLOCK_MONOTONIC_RAW, ""
	case Boottime:
		return 0, "darwin has no CLOCK_BOOTTIME (its CLOCK_MONOTONIC counts sleep)"
	case MonotonicCoarse:
		return 0, "darwin has no CLOCK_MONOTONIC_COARSE"
	}
	return 0, "unknown clock"
}
