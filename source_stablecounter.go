package schedclock

import (
	"fmt"

	"github.com/schedclock/schedclock/internal/kernel"
	"github.com/schedclock/schedclock/internal/timebase"
)

// stableCounterClocksource is the name under which the kernel registers
// the stable counter (clocksource_const, arch/loongarch/kernel/time.c).
const stableCounterClocksource = "Constant"

// stableCounterCounter is the stable counter's entry in the default
// clock's table: trusted on the kernel's word (its clocksource is
// Constant), which it follows for life, and only where a read costs no
// more than the portable source's. It runs on the CPUCFG rate, as the
// kernel does; under qemu-user, whose counter does not follow CPUCFG,
// the kernel's verdict is the host's and the entry is never adopted.
var stableCounterCounter = counter{arch: "loong64", probe: probeStableCounter, verdict: stableCounterVerdict, prepare: prepareReadCost}

// stableCounterVerdict is the kernel's verdict on the counter (see clocksourceVerdict).
func stableCounterVerdict() kernel.Verdict { return clocksourceVerdict(stableCounterClocksource) }

// StableCounter returns the loong64 stable counter as a Source: 64 bits,
// read with RDTIME.D between a barrier and a dependent acquire
// (source_stablecounter_loong64.s says why). Its Rate is what CPUCFG
// leaves 4 and 5 give, as the kernel's calc_const_freq computes it,
// checked against a 20 ms measurement; where the counter does not run at
// that rate (qemu-user's reads the host's TSC) StableCounter measures the
// rate against CLOCK_MONOTONIC_RAW, which blocks for another 200 ms. It
// reads no file.
//
// Off loong64, in a purego or non-gc build, err wraps ErrUnsupported;
// where CPUCFG gives no rate (no constant-frequency timer, a field left
// at 0) err wraps errUntrusted. The message says exactly why.
func stableCounterSource() (Source, error) {
	src, origin, _, err := probeStableCounter()
	return withMeasuredRate(src, origin, err)
}

// probeStableCounter is StableCounter with the origin and error of its
// rate.
func probeStableCounter() (src Source, origin rateOrigin, errPPM float64, err error) {
	if !stableCounterSupported {
		return Source{}, 0, 0, fmt.Errorf("%w %q: %s", ErrUnsupported, "stablecounter", noAsmReason("loong64"))
	}
	rate, err := stableCounterRate(cpucfg)
	if err != nil {
		return Source{}, 0, 0, err
	}
	return Source{Name: "stablecounter", Read: stableCounterReader(), Bits: timerBits, Rate: rate}, rateCPUCFG, nominalRateErrPPM, nil
}

// stableCounterRate reads the counter's rate from CPUCFG leaves 2, 4 and
// 5 through cfg.
func stableCounterRate(cfg func(leaf uint32) uint32) (uint64, error) {
	rate, err := timebase.StableCounterFrequency(cfg(2), cfg(4), cfg(5))
	if err != nil {
		return 0, fmt.Errorf("%w %q: %v", errUntrusted, "stablecounter", err)
	}
	return rate, nil
}
