package pvclock

import (
	"encoding/binary"
	"sync/atomic"
)

// TimeData is the head of the vDSO's time data: the first page of the
// [vvar] mapping, which the kernel rewrites at every timekeeping update
// (update_vsyscall, once per tick on a CPU that ticks, and on the way
// out of a tickless idle). Every layout since Linux 5.6 begins with the
// first clock base's struct vdso_clock (vdso_data before 6.13): a u32
// sequence count, even when stable, two per update; the clock mode; and
// the clocksource's counter value at the update (cycle_last).
type TimeData struct {
	seq       atomic.Uint32
	mode      int32
	cycleLast atomic.Uint64
}

// TimeDataSize is how much of the page ProbeTimeData copies to find the
// coarse clock's base in it: the struct vdso_clock of the high-resolution
// bases, whose basetime array (12 entries of 16 bytes) ends before 256
// bytes in every layout.
const TimeDataSize = 512

// Stamp identifies the kernel's last timekeeping update: its sequence
// count and its counter value, folded. It changes at every update and
// does not come back (the sequence count alone would after 2^31 updates,
// some 99 days of ticks at 250 Hz; the counter value on a 64-bit
// clocksource never does). A nil TimeData's stamp is 0, always.
func (t *TimeData) Stamp() uint64 {
	if t == nil {
		return 0
	}
	return t.cycleLast.Load() ^ uint64(t.seq.Load())<<32
}

// FindCoarse says whether b, a copy of the head of a vDSO time data page
// taken while its sequence count stood still, holds the kernel's
// CLOCK_MONOTONIC_COARSE time (sec, nsec) read meanwhile: a stable (even)
// count and the pair, 8-byte aligned, among the bases. A time namespace's
// page (its count stands at 1, its bases are offsets) and any other page
// fail.
func FindCoarse(b []byte, sec, nsec uint64) bool {
	if len(b) < 16 || binary.NativeEndian.Uint32(b)&1 != 0 {
		return false
	}
	for off := 16; off+16 <= len(b); off += 8 {
		if binary.NativeEndian.Uint64(b[off:]) == sec && binary.NativeEndian.Uint64(b[off+8:]) == nsec {
			return true
		}
	}
	return false
}
