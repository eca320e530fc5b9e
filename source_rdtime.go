package schedclock

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/schedclock/schedclock/internal/kernel"
	"github.com/schedclock/schedclock/internal/sysfile"
	"github.com/schedclock/schedclock/internal/timebase"
)

// rdtimeClocksource is the name under which the kernel registers the
// time CSR (drivers/clocksource/timer-riscv.c).
const rdtimeClocksource = "riscv_clocksource"

// rdtimeCounter is the time CSR's entry in the default clock's table:
// trusted on the kernel's word (its clocksource is riscv_clocksource),
// which it follows for life, and only where a read costs no more than
// the portable source's (some SBI implementations trap the CSR).
var rdtimeCounter = counter{arch: "riscv64", probe: probeRDTIME, verdict: rdtimeVerdict, prepare: prepareReadCost}

// rdtimeVerdict is the kernel's verdict on the counter (see clocksourceVerdict).
func rdtimeVerdict() kernel.Verdict { return clocksourceVerdict(rdtimeClocksource) }

// RDTIME returns the riscv64 time CSR as a Source: 64 bits, read with
// RDTIME between two fences (source_rdtime_riscv64.s says why both).
//
// Its Rate is the device tree's /cpus/timebase-frequency, the figure the
// kernel's timer driver runs on, checked against a 20 ms measurement
// (withMeasuredRate); where Linux exposes no device tree
// (ACPI systems, qemu-user) RDTIME measures the rate against
// CLOCK_MONOTONIC_RAW, which blocks for about 200 ms, rounded to the
// nearest Hz.
//
// Off riscv64, in a purego or non-gc build, err wraps ErrUnsupported;
// where the device tree's property is unusable (not one 32-bit cell, 0)
// err wraps errUntrusted. The message says exactly why.
func rdtimeSource() (Source, error) {
	src, origin, _, err := probeRDTIME()
	return withMeasuredRate(src, origin, err)
}

// probeRDTIME is RDTIME without the measurement: where the rate must be
// measured it returns Rate 0 and rateMeasured.
func probeRDTIME() (src Source, origin rateOrigin, errPPM float64, err error) {
	if !rdtimeSupported {
		return Source{}, 0, 0, fmt.Errorf("%w %q: %s", ErrUnsupported, "rdtime", noAsmReason("riscv64"))
	}
	property, readErr := sysfile.Read(timebase.DeviceTreePath)
	rate, origin, errPPM, err := rdtimeRate(property, readErr)
	if err != nil {
		return Source{}, 0, 0, err
	}
	return Source{Name: "rdtime", Read: rdtimeReader(), Bits: timerBits, Rate: rate}, origin, errPPM, nil
}

// rdtimeRate decides the time CSR's rate from the device tree's
// timebase-frequency property (its content, or the error reading it):
// no property at all means measuring; one that is there but unusable is
// firmware's mistake, and refused rather than papered over.
func rdtimeRate(property []byte, readErr error) (rate uint64, origin rateOrigin, errPPM float64, err error) {
	if errors.Is(readErr, fs.ErrNotExist) {
		return 0, rateMeasured, 0, nil
	}
	if readErr != nil {
		return 0, 0, 0, fmt.Errorf("%w %q: reading %s: %v", errUntrusted, "rdtime", timebase.DeviceTreePath, readErr)
	}
	rate, err = timebase.DeviceTreeFrequency(property)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("%w %q: %s: %v", errUntrusted, "rdtime", timebase.DeviceTreePath, err)
	}
	return rate, rateDeviceTree, nominalRateErrPPM, nil
}
