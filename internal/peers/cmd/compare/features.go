package main

// The features table is not measured: it is read from each package's
// source and documentation, at the versions this module requires (and,
// for templexxx/tsc, its upstream master where that differs). Update it
// when a peer or schedclock changes; internal/peers/README.md says what
// each cell rests on.

var featureColumns = []string{
	"wait-free readers",
	"monotonic across recalibration",
	"start-up blocking",
	"arm64",
	"suspend",
	"cross-CPU check",
	"watch for jumps",
	"fake sources",
	"wall time",
}

var features = []struct {
	name  string
	cells []string
}{
	{"schedclock (this tree)", []string{
		"yes: seqcount latch, two banks; a reader never waits for a writer",
		"yes: rate refinements, switches and re-anchorings go through the freezer; Update carries the sub-ns remainder",
		"no: counter adopted and refined in the background (init: a few CPUIDs and file reads)",
		"yes: CNTVCT_EL0 (ISB + ordering load), the kernel's counter-errata workarounds",
		"API: Suspend/Resume freezes time, the gap is not counted; nothing calls it on system suspend",
		"yes: check_tsc_warp in the background before trusting the counter, and the kernel's clocksource followed for life",
		"yes: watched against CLOCK_MONOTONIC_RAW (or any WithReference clock) every 100 ms; steps, jumps and rate changes re-anchored",
		"yes: New(Source) with any Read func; schedclocktest.NewManual for tests",
		"yes: WallNow / Clock.Time, following NTP slew and steps",
	}},
	{"time.Now / time.Since", []string{
		"bounded retry: vDSO seqcount, kernel writer",
		"yes (kernel timekeeping); the wall part of time.Now steps with settimeofday",
		"no",
		"yes",
		"CLOCK_MONOTONIC: does not count system suspend; no API",
		"the kernel's (TSC sync check, clocksource watchdog)",
		"the kernel's clocksource watchdog",
		"time inside a testing/synctest bubble",
		"yes: time.Now",
	}},
	{"templexxx/tsc", []string{
		"yes, but v0.0.3 loads offset and coefficient separately (a reader can mix old and new); master: one 16-byte AVX load",
		"no: Calibrate replaces offset and coefficient, time can step either way",
		"v0.0.3: none by default (TSC off unless TSC_FREQ_X is set, then a 1 s sleep in init); master: about 2 s of calibration in init (128 x 16 ms)",
		"no: amd64 only; v0.0.3 does not build elsewhere",
		"no",
		"no: trusts the CPUID invariant-TSC bit (master also a tsc kernel clocksource)",
		"no: the user must call Calibrate periodically",
		"no",
		"yes: UnixNano is Unix time",
	}},
	{"loov/hrtime", []string{
		"yes (TSC: bare RDTSC; first ApproxDuration calibrates under a sync.Once)",
		"n/a: the TSC ratio is measured once and never changed",
		"init: about 2000 clock reads; first ApproxDuration: a short calibration loop",
		"Now yes (time.Now); TSC returns 0 outside amd64",
		"no",
		"no: TSCSupported reports the CPUID invariant-TSC bit only",
		"no",
		"no",
		"Now: Unix ns as a Duration (outside Windows)",
	}},
	{"goarista/monotime", []string{
		"bounded retry: runtime.nanotime (vDSO)",
		"yes (kernel timekeeping)",
		"no",
		"yes",
		"CLOCK_MONOTONIC: does not count system suspend; no API",
		"the kernel's",
		"the kernel's",
		"no",
		"no",
	}},
}
