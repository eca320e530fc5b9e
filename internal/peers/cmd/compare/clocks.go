package main

import (
	"time"

	"github.com/aristanetworks/goarista/monotime"
	"github.com/loov/hrtime"
	"github.com/schedclock/schedclock"
)

// A clock is one row of the comparison.
type clock struct {
	// name is the row's label: the call a user would write.
	name string
	// pkgs are the packages whose initialisation counts as this clock's
	// start-up cost (their "clock" time under GODEBUG=inittrace=1).
	pkgs []string
	// open prepares the clock, as a user would before the first reading,
	// and returns a function that reads it in nanoseconds from any epoch.
	// Its cost and that of the first reading are the rest of the
	// start-up cost. An error means the clock is not measured, and why.
	open func() (func() int64, error)
	// note, if not nil, says after the table which path the clock took on
	// this machine.
	note func() string
}

var (
	schedPkgs  = []string{"github.com/schedclock/schedclock"}
	hrtimePkgs = []string{"github.com/loov/hrtime"}
	aristaPkgs = []string{"github.com/aristanetworks/goarista/monotime"}
)

// clocks lists every row, one line each. time.Since is the reference
// column; templexxxTSC is built only where that peer builds.
func clocks() []clock {
	return []clock{
		{name: "schedclock.Now", pkgs: schedPkgs, open: fixed(func() int64 { return int64(schedclock.Now()) }), note: defaultClockNote},
		{name: "schedclock New(Portable()).Now", pkgs: schedPkgs, open: openClock(func() (schedclock.Source, error) { return schedclock.Portable(), nil })},
		{name: "schedclock New(Hardware()).Now", pkgs: schedPkgs, open: openClock(schedclock.Hardware)},
		{name: "schedclock New(Paravirt()).Now", pkgs: schedPkgs, open: openClock(schedclock.Paravirt)},
		{name: "schedclock.Coarse (1 ms resolution)", pkgs: schedPkgs, open: fixed(func() int64 { return int64(schedclock.Coarse()) })},
		{name: "schedclock.WallNow().UnixNano()", pkgs: schedPkgs, open: fixed(func() int64 { return schedclock.WallNow().UnixNano() })},
		{name: referenceClock, open: since(time.Now())},
		{name: "time.Now().UnixNano()", open: fixed(func() int64 { return time.Now().UnixNano() })},
		{name: "hrtime.Now", pkgs: hrtimePkgs, open: fixed(func() int64 { return int64(hrtime.Now()) }), note: hrtimeNote},
		{name: "hrtime.TSC, ApproxDuration", pkgs: hrtimePkgs, open: hrtimeTSC},
		{name: "monotime.Now", pkgs: aristaPkgs, open: fixed(func() int64 { return int64(monotime.Now()) })},
		templexxxTSC(),
	}
}

// referenceClock is the row the "x time.Since" column divides by.
const referenceClock = "time.Since"

func fixed(read func() int64) func() (func() int64, error) {
	return func() (func() int64, error) { return read, nil }
}

func since(start time.Time) func() (func() int64, error) {
	return fixed(func() int64 { return int64(time.Since(start)) })
}

// openClock makes a Clock on a source, as a user who picks one would.
func openClock(source func() (schedclock.Source, error)) func() (func() int64, error) {
	return func() (func() int64, error) {
		src, err := source()
		if err != nil {
			return nil, err
		}
		c, err := schedclock.New(src)
		if err != nil {
			return nil, err
		}
		return func() int64 { return int64(c.Now()) }, nil
	}
}

// hrtimeTSC converts hrtime's counter to nanoseconds the way its
// documentation says: counts since a start, through Count.ApproxDuration,
// whose first call calibrates. (An absolute count times its ratio
// overflows int64 on a machine that has been up for a few hours.)
func hrtimeTSC() (func() int64, error) {
	start := hrtime.TSC()
	return func() int64 { return int64(hrtime.TSCSince(start).ApproxDuration()) }, nil
}

func defaultClockNote() string {
	in := schedclock.Default().Info()
	s := "schedclock's default clock runs on " + in.Source + " (rate from " + in.RateOrigin + ")"
	if in.Evidence.Rejected != "" {
		s += "; hardware counter not used: " + in.Evidence.Rejected
	}
	return s
}

func hrtimeNote() string {
	s := "hrtime v1.0.3: Now is time.Now().UnixNano() outside Windows; TSC is a bare RDTSC (no fence), converted with a ratio measured once"
	if hrtime.TSCSupported() {
		return s + "; TSCSupported() = true (CPUID invariant-TSC bit)"
	}
	return s + "; TSCSupported() = false"
}
