package schedclock

// The counter registers are read in assembly, each with the barriers that
// order its read after the caller's earlier loads and before its later
// ones (see each source_NAME_GOARCH.s): GOARCH's register, where a
// source_NAME_GOARCH.go and .s pair reads it (gc, not purego), which sets
// asm and asmBuild; none in every other build (source_noasm.go). Beside
// them, each counter's descriptor (descriptor.go: source_tsc.go,
// source_cntvct.go, and source_timer.go for the riscv64, ppc64le, s390x
// and loong64 counters as data): whether the counter is a clock here, at
// what rate, and on whose word, for the default clock's table.

import (
	"runtime"

	"github.com/schedclock/schedclock/internal/errata"
)

// asmReaders are the reads this build has; a field is nil where it has
// none.
type asmReaders struct {
	tsc, cntvct, rdtime, timebase, tod, stableCounter func() uint64

	cntfrq        func() uint64                      // arm64: CNTFRQ_EL0
	cpucfg        func(leaf uint32) uint32           // loong64: a CPUCFG word
	cntvctErratum func(errata.Erratum) func() uint64 // arm64: CNTVCT_EL0 under an erratum's workaround
}

// Whether the build reads each counter: constants, so that the code of
// the counters it does not read is not linked in.
const (
	tscSupported           = asmBuild && runtime.GOARCH == "amd64"
	cntvctSupported        = asmBuild && runtime.GOARCH == "arm64"
	rdtimeSupported        = asmBuild && runtime.GOARCH == "riscv64"
	timebaseSupported      = asmBuild && runtime.GOARCH == "ppc64le"
	todSupported           = asmBuild && runtime.GOARCH == "s390x"
	stableCounterSupported = asmBuild && runtime.GOARCH == "loong64"
)

// The counters' read functions, nil where the build does not read them.
func tscReader() func() uint64           { return asm.tsc }
func cntvctReader() func() uint64        { return asm.cntvct }
func rdtimeReader() func() uint64        { return asm.rdtime }
func timebaseReader() func() uint64      { return asm.timebase }
func todReader() func() uint64           { return asm.tod }
func stableCounterReader() func() uint64 { return asm.stableCounter }

// CNTFRQ is CNTFRQ_EL0, the counter frequency in Hz as firmware
// programmed it; 0 where the build does not read CNTVCT.
func cntfrq() uint64 {
	if asm.cntfrq == nil {
		return 0
	}
	return asm.cntfrq()
}

// CPUCFG is loong64's CPUCFG word of leaf; 0 where the build does not
// read the stable counter.
func cpucfg(leaf uint32) uint32 {
	if asm.cpucfg == nil {
		return 0
	}
	return asm.cpucfg(leaf)
}

// CNTVCTErratum returns the read of CNTVCT_EL0 to use under e (see
// cntvct_arm64.go); nil where the build does not read CNTVCT.
func cntvctErratum(e errata.Erratum) func() uint64 {
	if asm.cntvctErratum == nil {
		return nil
	}
	return asm.cntvctErratum(e)
}
