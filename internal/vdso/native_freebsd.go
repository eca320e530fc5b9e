package vdso

import "golang.org/x/sys/unix"

// nativeClock maps an ID to FreeBSD's clock of the same meaning, or says
// why there is none.
func nativeClock(id ID) (int32, string) {
	switch id {
	case Realtime:
		return unix.CLOCK_REALTIME, ""
	case Monotonic:
		return unix.CLOCK_MONOTONIC, ""
	case MonotonicCoarse:
		return unix.CLOCK_MONOTONIC_FAST, ""
	case MonotonicRaw:
		return 0, "freebsd has no CLOCK_MONOTONIC_RAW"
	case Boottime:
		return 0, "freebsd's CLOCK_BOOTTIME is CLOCK_UPTIME, which stops in suspend"
	}
	return 0, "unknown clock"
}
