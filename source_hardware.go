package schedclock

// Hardware returns this machine's counter register as a Source, the
// counter the default clock runs on where it trusts it, read with the
// barriers that order it after earlier loads:
//
//   - amd64: the TSC (LFENCE; RDTSC), offered only where CPUID reports an
//     invariant TSC and the kernel's clocksource, where it can be read, is
//     "tsc";
//   - arm64: the virtual counter CNTVCT_EL0, at the rate in CNTFRQ_EL0;
//   - riscv64: the time CSR; ppc64le: the time base; loong64: the stable
//     counter; s390x: the time-of-day clock, at its architected 4.096 GHz.
//
// The rate is what the CPU or the firmware declares (CPUID leaf 0x15 or
// the hypervisor's leaf, CNTFRQ_EL0, the device tree, /proc/cpuinfo,
// CPUCFG; on riscv64, ppc64le and loong64 checked against a 20 ms
// measurement). Where nothing declares it, Hardware measures it against
// CLOCK_MONOTONIC_RAW, which blocks for about 20 ms (the TSC, unless the
// default clock already measured it) or 200 ms (the others). Give the Clock a reference (WithReference) to have the rate
// refined and the counter watched for life, as the default clock does.
//
// On other architectures, in a purego or non-gc build, and where the
// counter cannot be trusted as a clock (no invariant TSC, a kernel on
// another clocksource, a rate of 0), the error wraps ErrUnsupported and
// says exactly why. Portable works everywhere.
func Hardware() (Source, error) { return hardware() }
