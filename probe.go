package schedclock

import (
	"fmt"
	"runtime"
)

// probeHardware returns this machine's hardware counter without blocking:
// the TSC on amd64, CNTVCT_EL0 on arm64. When the rate must be measured,
// src.Rate is 0 and origin is RateMeasured. err wraps ErrUnsupported or
// ErrUntrusted and says why when there is no counter to use.
func probeHardware() (src Source, origin RateOrigin, errPPM float64, err error) {
	switch runtime.GOARCH {
	case "amd64":
		return probeTSC()
	case "arm64":
		return probeCNTVCT()
	}
	return Source{}, 0, 0, fmt.Errorf("%w: no hardware counter for GOARCH=%s", ErrUnsupported, runtime.GOARCH)
}

// noAsmReason says which half of the assembly's build tag (gc && !purego,
// on arch) excluded it from this build.
func noAsmReason(arch string) string {
	switch {
	case runtime.GOARCH != arch:
		return "not " + arch + " (GOARCH=" + runtime.GOARCH + ")"
	case runtime.Compiler != "gc":
		return "built with " + runtime.Compiler + ", not gc"
	}
	return "built with the purego tag"
}

// hardwareVerdict returns the default clock's check that the kernel still
// trusts the hardware counter name: "" while it does, else why not. The
// kernel's clocksource watchdog can demote the TSC hours after boot;
// where there is no sysfs file to read (not Linux), or for a counter the
// kernel gives no verdict on, it has nothing to say.
func hardwareVerdict(name string) func() string {
	if name != "tsc" {
		return nil
	}
	return func() string {
		if cs := readClocksource(); cs != "" && cs != "tsc" {
			return fmt.Sprintf("%s: the kernel's clocksource changed to %s (its watchdog no longer trusts the TSC)", name, cs)
		}
		return ""
	}
}
