//go:build linux && gc && !purego

package vdso

// gSlotNow: amd64 has no g slot (call_linux_amd64.go).
func gSlotNow() uintptr { return 0 }

// shiftedCall runs the call with the Go SP at the other alignment mod 16.
var shiftedCall = callClockGettimeShifted
