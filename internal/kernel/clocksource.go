// Package kernel reads what the kernel tells user space about its
// timekeeping: on Linux, the clocksource it uses now (sysfs) and, when
// that is not the counter a clock wants, whether its watchdog demoted
// that counter or someone switched away from it by hand; and, on Linux
// and macOS, CLOCK_MONOTONIC_RAW, the unsteered clock that rates are
// measured against. Where the kernel has no such file or clock, it says
// so.
package kernel

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// The kernel keeps judging its clocksource for as long as it runs: its
// watchdog compares the TSC with another clocksource every half second
// and demotes it (to hpet, acpi_pm, kvm-clock, ...) when the two drift
// apart, which happens hours after boot on some machines (a firmware SMI
// that stops the TSC, a hypervisor that changes its rate). A user-space
// clock on the same counter cannot see what the watchdog saw; it can
// follow its verdict. A Verdict is one reading of it, cheap enough (one
// small sysfs read) for a background goroutine to take every few seconds.

// ClocksourcePath names the kernel's current clocksource. The kernel
// demotes the TSC (to hpet, acpi_pm, kvm-clock, ...) when its watchdog
// sees it drift or stop, something CPUID cannot know.
const ClocksourcePath = "/sys/devices/system/clocksource/clocksource0/current_clocksource"

// Clocksource returns the kernel's current clocksource, or "" where the
// file does not exist or cannot be read (not Linux, no sysfs).
func Clocksource() string {
	content, err := os.ReadFile(ClocksourcePath)
	if err != nil {
		return ""
	}
	return parseCurrent(content)
}

// parseCurrent reads a current_clocksource file: one name and a newline.
func parseCurrent(content []byte) string { return strings.TrimSpace(string(content)) }

// parseAvailable reads an available_clocksource file: names, each
// followed by a space, then a newline.
func parseAvailable(content []byte) []string { return strings.Fields(string(content)) }

// Verdict is what current_clocksource said about a counter.
type Verdict struct {
	Want    string // the kernel clocksource that means our counter ("tsc")
	Current string // current_clocksource; "" when it could not be read
	Err     error  // why it could not be read (no sysfs, not Linux)
	// Available lists available_clocksource when Current is not Want. A
	// clocksource the watchdog marked unstable loses
	// CLOCK_SOURCE_VALID_FOR_HRES, and available_clocksource_show hides
	// those while the tick runs one-shot (NO_HZ or high-res timers, the
	// usual): so a TSC missing from it was demoted, one still in it was
	// most likely switched away from by hand.
	Available []string
}

// ReadVerdict reads the kernel's current clocksource from path (a
// current_clocksource file; available_clocksource is read beside it only
// when the counter is not the current one).
func ReadVerdict(path, want string) Verdict {
	content, err := os.ReadFile(path)
	if err != nil {
		return Verdict{Want: want, Err: err}
	}
	return verdictOf(want, content, func() ([]byte, error) {
		return os.ReadFile(path[:strings.LastIndexByte(path, '/')+1] + "available_clocksource")
	})
}

// verdictOf is ReadVerdict on a current_clocksource file's content; it
// calls readAvailable only when the counter is not the current one.
func verdictOf(want string, current []byte, readAvailable func() ([]byte, error)) Verdict {
	v := Verdict{Want: want, Current: parseCurrent(current)}
	if v.Current != want {
		if available, err := readAvailable(); err == nil {
			v.Available = parseAvailable(available)
		}
	}
	return v
}

// TSCVerdict is ReadVerdict for the TSC at the real path.
func TSCVerdict() Verdict {
	return ReadVerdict(ClocksourcePath, "tsc")
}

// Known reports whether the file could be read: where it cannot (not
// Linux, no sysfs in a container), the kernel gives no verdict and the
// counter keeps the trust CPUID gave it, as at start.
func (v Verdict) Known() bool { return v.Err == nil }

// Keep reports whether the counter may stay: the kernel uses it, or says
// nothing.
func (v Verdict) Keep() bool { return v.Err != nil || v.Current == v.Want }

func (v Verdict) String() string {
	switch {
	case v.Err != nil:
		return fmt.Sprintf("kernel clocksource unknown (%v)", v.Err)
	case v.Current == v.Want:
		return "kernel clocksource is " + v.Current
	case v.Current == "":
		return "kernel clocksource is empty, not " + v.Want
	}
	s := fmt.Sprintf("kernel clocksource is %s, not %s", v.Current, v.Want)
	switch {
	case v.Available == nil:
		return s
	case slices.Contains(v.Available, v.Want):
		return s + fmt.Sprintf(" (%s still available)", v.Want)
	}
	s += " (" + v.Want + " not available: available are "
	for i, name := range v.Available {
		if i > 0 {
			s += " "
		}
		s += name // strings.Join, as it would write it, but not linked for this line alone
	}
	return s + ")"
}
