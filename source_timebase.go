package schedclock

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/schedclock/schedclock/internal/kernel"
	"github.com/schedclock/schedclock/internal/sysfile"
	"github.com/schedclock/schedclock/internal/timebase"
)

// timebaseClocksource is the name under which the kernel registers the
// time base (clocksource_timebase, arch/powerpc/kernel/time.c).
const timebaseClocksource = "timebase"

// timebaseCounter is the time base's entry in the default clock's table:
// trusted on the kernel's word (its clocksource is timebase), which it
// follows for life, and only where a read costs no more than the
// portable source's.
var timebaseCounter = counter{arch: "ppc64le", probe: probeTimeBase, verdict: timebaseVerdict, prepare: prepareReadCost}

// timebaseVerdict is the kernel's verdict on the counter (see clocksourceVerdict).
func timebaseVerdict() kernel.Verdict { return clocksourceVerdict(timebaseClocksource) }

// TimeBase returns the ppc64le time base register as a Source: 64 bits,
// read with mftb between an isync and an acquire load
// (source_timebase_ppc64le.s says why).
//
// Its Rate is /proc/cpuinfo's timebase line, the kernel's ppc_tb_freq,
// checked against a 20 ms measurement (withMeasuredRate); where cpuinfo
// has none (qemu-user passes the host's file through)
// TimeBase measures the rate against CLOCK_MONOTONIC_RAW, which blocks
// for about 200 ms, rounded to the nearest Hz.
//
// Off ppc64le, in a purego or non-gc build, err wraps ErrUnsupported;
// where cpuinfo's timebase line is unusable (not a number, 0, two
// rates) err wraps errUntrusted. The message says exactly why.
func timeBaseSource() (Source, error) {
	src, origin, _, err := probeTimeBase()
	return withMeasuredRate(src, origin, err)
}

// probeTimeBase is TimeBase without the measurement: where the rate must
// be measured it returns Rate 0 and rateMeasured.
func probeTimeBase() (src Source, origin rateOrigin, errPPM float64, err error) {
	if !timebaseSupported {
		return Source{}, 0, 0, fmt.Errorf("%w %q: %s", ErrUnsupported, "timebase", noAsmReason("ppc64le"))
	}
	cpuinfo, readErr := sysfile.Read(timebase.CPUInfoPath)
	rate, origin, errPPM, err := timebaseRate(cpuinfo, readErr)
	if err != nil {
		return Source{}, 0, 0, err
	}
	return Source{Name: "timebase", Read: timebaseReader(), Bits: timerBits, Rate: rate}, origin, errPPM, nil
}

// timebaseRate decides the time base's rate from /proc/cpuinfo (its
// content, or the error reading it): no file, or a file without a
// timebase line (another architecture's, under emulation), means
// measuring; a timebase line that is unusable is refused.
func timebaseRate(cpuinfo []byte, readErr error) (rate uint64, origin rateOrigin, errPPM float64, err error) {
	if errors.Is(readErr, fs.ErrNotExist) {
		return 0, rateMeasured, 0, nil
	}
	if readErr != nil {
		return 0, 0, 0, fmt.Errorf("%w %q: reading %s: %v", errUntrusted, "timebase", timebase.CPUInfoPath, readErr)
	}
	rate, err = timebase.CPUInfoTimebase(cpuinfo)
	switch {
	case errors.Is(err, timebase.ErrNoTimebaseLine):
		return 0, rateMeasured, 0, nil
	case err != nil:
		return 0, 0, 0, fmt.Errorf("%w %q: %s: %v", errUntrusted, "timebase", timebase.CPUInfoPath, err)
	}
	return rate, rateCPUInfo, nominalRateErrPPM, nil
}
