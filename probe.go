package schedclock

import (
	"fmt"
	"runtime"

	"github.com/schedclock/schedclock/internal/kernel"
	"github.com/schedclock/schedclock/internal/warp"
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
// trusts the hardware counter name: "" while it does, else why not (see
// kernel.Verdict). The kernel's clocksource watchdog can demote the TSC
// hours after boot. The arm64 generic timer has no such watchdog (and
// under qemu-user sysfs is the host's), so only the TSC is followed.
// Where there is no sysfs file to read (not Linux), the kernel has
// nothing to say.
func hardwareVerdict(name string) func() string {
	if name != "tsc" {
		return nil
	}
	return func() string {
		if v := kernel.TSCVerdict(); !v.Keep() {
			return fmt.Sprintf("%s: %s", name, v)
		}
		return ""
	}
}

// warpUntrusted returns nil unless the cross-CPU check found a warp, and
// then an error wrapping ErrUntrusted that names the counter, the CPUs
// and the warp.
func warpUntrusted(r warp.Report, name string) error {
	if r.Verdict != warp.Found {
		return nil
	}
	return fmt.Errorf("%w %q: %s", ErrUntrusted, name, r)
}
