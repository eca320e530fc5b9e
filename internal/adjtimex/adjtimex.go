// Package adjtimex reads the kernel's own estimate of CLOCK_REALTIME's
// error: adjtimex(2) with modes 0, whose maxerror and esterror (µs) the
// synchronisation daemon (chronyd, ntpd) writes at each update, and which
// the kernel grows by 500 µs every second in between (second_overflow in
// kernel/time/ntp.c: time_maxerror += MAXFREQ / NSEC_PER_USEC), marking
// the clock unsynchronised (STA_UNSYNC) once it passes 16 s.
//
// A Reading is one such answer; its methods are the arithmetic: the bound
// it gives at an age, whether it says synchronised, and whether a later
// reading shows the daemon set the values again.
package adjtimex

import (
	"errors"
	"math/bits"

	"github.com/schedclock/schedclock/internal/format"
)

// Sentinel errors; each error this package returns wraps one of them.
var (
	// ErrUnsupported: no adjtimex here (not Linux), or the call failed.
	ErrUnsupported = errors.New("adjtimex: not available")
	// ErrImplausible: values the kernel does not produce (it clamps
	// maxerror to 0..16 s).
	ErrImplausible = errors.New("adjtimex: implausible values")
)

// The kernel's constants (include/uapi/linux/timex.h, include/linux/timex.h).
const (
	StaNano      = 0x2000
	StaPLL       = 0x0001
	StaPPSFreq   = 0x0002
	StaPPSTime   = 0x0004
	StaUnsync    = 0x0040
	StaPPSSignal = 0x0100
	StaPPSJitter = 0x0200
	StaPPSWander = 0x0400
	StaPPSError  = 0x0800
	StaClockErr  = 0x1000

	// TimeError is the state adjtimex returns while is_error_status holds.
	TimeError = 5

	// PhaseLimitUs is NTP_PHASE_LIMIT, 16 s: maxerror's ceiling, past
	// which the kernel sets STA_UNSYNC.
	PhaseLimitUs = 16_000_000
	// GrowthUsPerSec is MAXFREQ / NSEC_PER_USEC: what second_overflow adds
	// to maxerror each second.
	GrowthUsPerSec = 500
)

// Reading is one answer of adjtimex with modes 0.
type Reading struct {
	MaxErrorUs int64 // time_maxerror
	EstErrorUs int64 // time_esterror
	Status     int32 // time_status
	State      int   // the call's result: TIME_OK ... TIME_ERROR
	// How the kernel steers CLOCK_REALTIME's pace against its
	// clocksource: the frequency (ppm × 2^16), the tick (µs per
	// 1/USER_HZ s, nominally 10000), and the phase still to be slewed
	// in PLL mode (µs, or ns with STA_NANO).
	Freq, Tick, Offset int64
}

// NominalTick is the tick with no adjustment: 1e6/USER_HZ µs.
const NominalTick = 10_000

// SlewPPB is the pace the kernel gives CLOCK_REALTIME against its
// clocksource, in ppb: the tick's difference from nominal (100 ppm for
// each µs, at USER_HZ 100) and the frequency. A phase being slewed in
// PLL mode adds up to 500 ppm, which SlewPPB does not try to predict.
func (r Reading) SlewPPB() int64 {
	return (r.Tick-NominalTick)*100_000 + r.Freq*1000/65536
}

// Check says why r cannot be the kernel's answer, or nil: the kernel
// clamps maxerror and esterror to 0..NTP_PHASE_LIMIT.
func (r Reading) Check() error {
	if r.MaxErrorUs < 0 || r.MaxErrorUs > PhaseLimitUs || r.EstErrorUs < 0 || r.EstErrorUs > PhaseLimitUs {
		return format.Errorf("%w: maxerror %d µs, esterror %d µs", ErrImplausible, r.MaxErrorUs, r.EstErrorUs)
	}
	return nil
}

// Unsynchronised says why the kernel counts its clock unsynchronised, ""
// when it does not: is_error_status in kernel/time/ntp.c (STA_UNSYNC,
// STA_CLOCKERR, a PPS discipline without its signal or beyond its
// limits), which is also when adjtimex returns TIME_ERROR.
func (r Reading) Unsynchronised() string {
	s := r.Status
	switch {
	case s&StaUnsync != 0:
		return "STA_UNSYNC"
	case s&StaClockErr != 0:
		return "STA_CLOCKERR"
	case s&(StaPPSFreq|StaPPSTime) != 0 && s&StaPPSSignal == 0:
		return "PPS discipline without a PPS signal"
	case s&(StaPPSTime|StaPPSJitter) == StaPPSTime|StaPPSJitter:
		return "PPS jitter"
	case s&StaPPSFreq != 0 && s&(StaPPSWander|StaPPSError) != 0:
		return "PPS wander or calibration error"
	case r.State == TimeError:
		return "TIME_ERROR"
	}
	return ""
}

// maxBoundNs caps a bound (146 years): arithmetic on it never overflows.
const maxBoundNs = 1 << 62

// RatePPB is the kernel's growth of maxerror in ppb of the age as a
// clock marginPPM slower than the kernel's seconds measures it: 500 ppm,
// rounded up after the margin.
func RatePPB(marginPPM int64) int64 {
	const base = GrowthUsPerSec * 1000
	return base + (base*max(marginPPM, 0)+1e6-1)/1e6
}

// BoundNs is the bound r gives on CLOCK_REALTIME's error ageNs after it
// was read, the kernel's growth taken at ratePPB (RatePPB): maxerror,
// plus one 500 µs step (maxerror grows once a second, so the value read
// lags the continuous growth by up to one step), plus ratePPB of the
// age, rounded up. A negative age counts as its magnitude: the bound a
// later reading gives holds a little earlier too, by the same growth.
func (r Reading) BoundNs(ageNs, ratePPB int64) int64 {
	if ageNs < 0 {
		ageNs = -ageNs
	}
	base := min(max(r.MaxErrorUs, 0), PhaseLimitUs)*1000 + GrowthUsPerSec*1000
	return min(base+GrowthNs(ageNs, ratePPB), maxBoundNs)
}

// GrowthNs is ageNs × ppb / 1e9, rounded up, saturated to maxBoundNs.
func GrowthNs(ageNs, ppb int64) int64 {
	if ageNs <= 0 || ppb <= 0 {
		return 0
	}
	if ageNs < 1<<33 && ppb < 1<<30 {
		// The read path's case (an age of seconds): no 128-bit division.
		return (ageNs*ppb + 1e9 - 1) / 1e9
	}
	hi, lo := bits.Mul64(uint64(ageNs), uint64(ppb))
	if hi >= 1e9 {
		return maxBoundNs
	}
	q, rem := bits.Div64(hi, lo, 1e9)
	if rem != 0 {
		q++
	}
	return int64(min(q, maxBoundNs))
}

// AgeAtLimitNs is how long after r the kernel's maxerror, growing at
// ratePPB, passes NTP_PHASE_LIMIT: when the kernel sets STA_UNSYNC unless
// the daemon sets the values again. Rounded down.
func (r Reading) AgeAtLimitNs(ratePPB int64) int64 {
	left := uint64(PhaseLimitUs-min(max(r.MaxErrorUs, 0), PhaseLimitUs)) * 1000
	hi, lo := bits.Mul64(left, 1e9)
	q, _ := bits.Div64(hi, lo, uint64(max(ratePPB, GrowthUsPerSec*1000))) // at most 3.2e13 ns
	return int64(q)
}

// SetSince reports whether later, read elapsedNs after r (measured on a
// clock up to marginPPM slower than the kernel's seconds), shows the
// values set again in between: esterror changed (only a write changes
// it), or maxerror below what the kernel's growth alone gives (one 500
// µs step per whole second elapsed at least, short of the 16 s ceiling).
func (r Reading) SetSince(later Reading, elapsedNs, marginPPM int64) bool {
	if later.EstErrorUs != r.EstErrorUs {
		return true
	}
	seconds := max(elapsedNs, 0) / (1e9 + 1e3*max(marginPPM, 0))
	grown := min(r.MaxErrorUs+min(seconds, PhaseLimitUs/GrowthUsPerSec)*GrowthUsPerSec, PhaseLimitUs)
	return later.MaxErrorUs < grown
}
