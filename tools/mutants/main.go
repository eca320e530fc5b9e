// Command mutants proves that the tests defend every safeguard of the read
// path: it copies the repository to a temporary directory, applies each
// mutation (a small textual edit of one file: a fence removed, a re-check
// deleted, a clamp dropped), runs the tests that should notice, and
// requires them to fail. It prints a table (mutation, killed or survived,
// the test that killed it) and exits non-zero if a mutation survives that
// is not documented as unobservable here, if a mutation's pattern no
// longer matches the code (a mutation that applies to nothing must not
// count as killed), if a mutant does not build, or if the unmutated tests
// fail.
//
// Usage (from the repository root; make mutants, make mutants-fast):
//
//	go run ./tools/mutants [-fast] [-only regexp] [-v]
//
// -fast runs the CI subset (MUTANTS=fast in the environment does the
// same). When the code a mutation edits changes, update its Old text:
// each pattern is kept to the one line or instruction it removes.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"
)

// edit replaces Old by New, exactly Count times, in a mutation's file.
type edit struct {
	Old, New string
	Count    int
}

type mutation struct {
	Name  string
	File  string
	Edits []edit
	// Arch is the GOARCH the tests run under: "" for the host (amd64 for
	// the TSC mutations), "arm64" for qemu-aarch64.
	Arch string
	// Run selects the tests that should kill the mutation (go test -run).
	Run string
	// Fast puts the mutation in the CI subset.
	Fast bool
	// Unobservable, when set, says why no test can see the mutation on
	// the hardware at hand; it is still applied and run, and a survival
	// is reported as expected rather than failing the run.
	Unobservable string
	// Pkg is the package whose tests run, relative to the repository
	// root; "" is the root package.
	Pkg string
}

const (
	orderingTests = "^(TestCrossCPUOrdering|TestReadersUnderBackToBackPublications)$"
	// Why the dependent loads after the counter read cannot be seen on
	// an x86 CPU: see the README's mutation table.
	afterReadWindow = "a later load can pass RDTSC only by RDTSC's own latency (two LFENCE;RDTSC in a row are 21 counts apart on the AMD EPYC this was measured on), while a reading is never closer than 63 counts (126-168 in most runs) to the writer's counter read after the next publication (TestReadersUnderBackToBackPublications logs the smallest A_j+1-t, the same with and without the dependency)"
	// Why no barrier of the riscv64, ppc64le, s390x and loong64 readers
	// can be seen: the same for every qemu-user target.
	qemuTargetInOrder = "qemu-user (TCG) runs each instruction in order and reads the counter through a helper call: TestCrossCPUOrdering shows 0 inversions with or without the barrier; real silicon may reorder, nothing here can"
	// Why the loong64 reader's barriers cannot be seen either.
	qemuLoongHostCounter = "qemu-loongarch64 7.2 implements RDTIME.D as the host's bare RDTSC, which the host reorders whatever guest barrier is there (readStableCounter itself showed 10,091 cross-CPU inversions), so the ordering tests leave that reader out under emulation (timerReaderHere)"
	qemuInOrder          = "qemu-user runs arm64 instructions one at a time: an MRS CNTVCT_EL0 with no barrier at all shows 0 inversions in 20M handoffs (TestCrossCPUOrdering/unfenced)"
)

var mutations = []mutation{
	{
		Name: "clockNow: no LFENCE before RDTSC", File: "now_amd64.s",
		Edits: []edit{{Old: "\tLFENCE // RDTSC waits until the loads of seq and of the bank's read function have completed.\n", Count: 1}},
		Run:   orderingTests, Fast: true,
	},
	{
		Name: "readTSC: no LFENCE before RDTSC", File: "source_tsc_amd64.s",
		Edits: []edit{{Old: "\tLFENCE // RDTSC waits until the earlier loads of the latch bank have completed.\n", Count: 1}},
		Run:   orderingTests, Fast: true,
	},
	{
		Name: "clockNow: seq re-check without the dependent address", File: "now_amd64.s",
		Edits:        []edit{{Old: "latch_seq(DI)(R10*1)", New: "latch_seq(DI)", Count: 1}},
		Run:          orderingTests,
		Unobservable: afterReadWindow,
	},
	{
		Name: "readTSC: no dependent load after RDTSC", File: "source_tsc_amd64.s",
		Edits:        []edit{{Old: "\tMOVQ 0(SP)(CX*1), CX // a load that cannot be performed before RDTSC", New: "\t// MOVQ 0(SP)(CX*1), CX // a load that cannot be performed before RDTSC", Count: 1}},
		Run:          orderingTests,
		Unobservable: afterReadWindow,
	},
	{
		Name: "clockNow: no seq re-check", File: "now_amd64.s",
		Edits: []edit{{Old: "\tCMPQ   R9, latch_seq(DI)(R10*1)\n\tJNE    retry\n\tMOVQ   AX, ret+8(FP)\n", New: "\tMOVQ   AX, ret+8(FP)\n", Count: 1}},
		Run:   orderingTests,
	},
	{
		Name: "generic reader: no seq re-check", File: "now.go",
		Edits: []edit{{Old: "\t\tif c.latch.seq.Load() == seq {\n\t\t\treturn ns\n\t\t}\n\t}\n}", New: "\t\treturn ns\n\t}\n}", Count: 1}},
		Run:   "^TestGenericReaderRechecksSeq$", Fast: true,
	},
	{
		Name: "portable reader: no seq re-check", File: "now.go",
		Edits: []edit{{Old: "\t\tif next == seq {", New: "\t\tif true {", Count: 1}},
		Run:   orderingTests,
	},
	{
		Name: "portable reader: no orderAfter", File: "now.go",
		Edits:        []edit{{Old: "\t\torderAfter(cyc)\n", Count: 1}},
		Run:          orderingTests,
		Unobservable: "the vDSO's RDTSC is followed by the same kind of load as clockNow's re-check: " + afterReadWindow,
	},
	{
		Name: "readMono: no orderAfter", File: "source.go",
		Edits:        []edit{{Old: "\torderAfter(v)\n", Count: 1}},
		Run:          orderingTests,
		Unobservable: "the vDSO's RDTSC is followed by the same kind of load as clockNow's re-check: " + afterReadWindow,
	},
	{
		Name: "freezer: pin without the clamp", File: "switch.go",
		Edits: []edit{{Old: "delta := clampDelta((fz.old()-fz.epochCyc)&fz.mask, fz.mask)", New: "delta := (fz.old()-fz.epochCyc)&fz.mask", Count: 1}},
		Run:   "^TestPinClampsACounterBelowTheEpoch$", Fast: true,
	},
	{
		Name: "Update: unmasked epoch", File: "schedclock.go",
		Edits: []edit{{Old: "next.epochCyc = cyc & c.cur.conv.mask", New: "next.epochCyc = cyc", Count: 1}},
		Run:   "^TestUpdateMasksTheEpoch$", Fast: true,
	},
	{
		Name: "window: fastMax off by one", File: "clocksource.go",
		Edits: []edit{{Old: "return min(negativeFrom(cv.mask), cv.overflowFrom()) - 1", New: "return min(negativeFrom(cv.mask), cv.overflowFrom())", Count: 1}},
		Run:   "^TestFastPathWindowEdges$", Fast: true,
	},
	{
		Name: "addSaturating: no saturation", File: "latch.go",
		Edits: []edit{{Old: "if room := uint64(math.MaxInt64) - uint64(epochNs); delta > room {", New: "if room := uint64(math.MaxInt64) - uint64(epochNs); false && delta > room {", Count: 1}},
		Run:   "^(TestNowSaturates|TestHostileCounters)$", Fast: true,
	},
	{
		Name: "fastMax: not bounded by saturation", File: "latch.go",
		Edits: []edit{{Old: "\treturn min(ln.conv.window(), limit)", New: "\treturn min(ln.conv.window(), max(limit, ln.conv.window()))", Count: 1}},
		Run:   "^FuzzLine$", Fast: true,
	},
	{
		Name: "switchLine: no fold of a wrapping counter's anchor", File: "switch.go",
		Edits: []edit{{Old: "\tif conv.wraps() {\n\t\t// The anchor's", New: "\tif false && conv.wraps() {\n\t\t// The anchor's", Count: 1}},
		Run:   "^TestNarrowSwitchWithTheWriterStopped$", Fast: true,
	},
	{
		Name: "tick: a suspended clock's verdict still scheduled", File: "trust.go",
		Edits: []edit{{Old: "return time.Time{} // neither polled nor scheduled", New: "return p.verdictDue", Count: 1}},
		Run:   "^TestASuspendedClockSleeps$", Fast: true,
	},
	{
		Name: "tick: the tracking's faults not kept from the fold", File: "schedclock.go",
		Edits: []edit{{Old: "\t\tc.trackSafelyLocked(tr, now)", New: "\t\tc.trackLocked(tr, now)", Count: 1}},
		Run:   "^TestAPanickingReferenceNeverStopsTheFolds$", Fast: true,
	},
	{
		Name: "trackLocked: a refinement without the watch's agreement", File: "calibrate.go",
		Edits: []edit{{
			Old:   "\t\tif now.Before(tr.watchDue) {\n\t\t\treturn\n\t\t}\n\t\ttr.watchDue = now.Add(tr.watchEvery)\n\t\tc.watchLocked(tr, now)\n\t\tif c.track != tr || tr.restart || tr.probe != nil {\n\t\t\treturn\n\t\t}\n",
			New:   "\t\tif !now.Before(tr.watchDue) {\n\t\t\ttr.watchDue = now.Add(tr.watchEvery)\n\t\t\tc.watchLocked(tr, now)\n\t\t\tif c.track != tr || tr.restart || tr.probe != nil {\n\t\t\t\treturn\n\t\t\t}\n\t\t}\n",
			Count: 1}},
		Run: "^TestRefinementsWaitForTheWatch$", Fast: true,
	},
	{
		Name: "refineLocked: a pending counter measured every 20 ms", File: "calibrate.go",
		Edits: []edit{{Old: "\t\t\ttr.refineDue = now.Add(trustWait)", New: "\t\t\ttr.refineDue = now.Add(firstMeasurement)", Count: 1}},
		Run:   "^TestPendingTrustDoesNotSpin$", Fast: true,
	},
	{
		Name: "relateAnchor: not floored at the pinned value", File: "switch.go",
		Edits: []edit{{Old: "if atNs > ns || atNs == ns && atFrac > frac {", New: "if true {", Count: 1}},
		Run:   "^TestRelateAnchorNeverBelowThePin$", Fast: true,
	},
	{
		Name: "freezer: pins before its publication", File: "switch.go",
		Edits: []edit{{Old: "\tif fz.seq.Load() < fz.armedAt {\n\t\treturn fz.old()\n\t}\n", Count: 1}},
		Run:   "^TestStaleReaderPinsFreezerEarly$", Fast: true,
	},
	{
		Name: "exitOrPanic: a Goexit taken for a normal return", File: "faults.go",
		Edits: []edit{{Old: "\tif r == nil && !returned {\n\t\treturn goexit{}\n\t}\n", Count: 1}},
		Run:   "^TestGoexit", Fast: true,
	},
	{
		Name: "runBackground: an exited goroutine not replaced", File: "schedclock.go",
		Edits: []edit{{Old: "\t\t\tgo runBackground(w, st, st.faults.retry)\n", Count: 1}},
		Run:   "^TestGoexitInTheBackground$", Fast: true,
	},
	{
		Name: "New: no cleanup for a dropped clock", File: "schedclock.go",
		Edits: []edit{{Old: "runtime.AddCleanup(c, stopUnreachable, c.clockState)", New: "runtime.AddCleanup(c, func(*clockState) {}, c.clockState)", Count: 1}},
		Run:   "^TestUnreachableClocksStop$", Fast: true,
	},
	{
		Name: "wall map: a step replaces the map (earlier readings move)", File: "wall.go",
		Edits: []edit{{Old: "c.wall.Store(old.with(wallSegment{at: at, wall: addSat(wall, at-clock)}))", New: "c.wall.Store(&wallMap{segs: []wallSegment{{at: clock, wall: wall}}})", Count: 1}},
		Run:   "^TestTimeOfAReadingSurvivesStepsAndSlew$", Fast: true,
	},
	{
		Name: "Manual.foldAcross: no fold before the move", File: "manual.go",
		Edits: []edit{{Old: "\t\tc.updateLocked() // the epoch is now the counter before the move\n", Count: 1}},
		Run:   "^TestManualFoldsEveryClockOnIt$", Fast: true,
	},
	{
		Name: "updateLocked: lost wraps not added back", File: "schedclock.go",
		Edits: []edit{{Old: "\tif lost > 0 {\n\t\t// The lost wraps", New: "\tif false {\n\t\t// The lost wraps", Count: 1}},
		Run:   "^(TestAFoldLateByWholeWrapsAddsThemBack|TestLateFoldsAreExact)$", Fast: true,
	},
	{
		Name: "updateLocked: a late fold's delta in the negative zone taken for a step back", File: "schedclock.go",
		Edits: []edit{{Old: "mono-c.fold.lastMono); forward {", New: "mono-c.fold.lastMono); forward && false {", Count: 1}},
		Run:   "^TestLateFoldsAreExact$", Fast: true,
	},
	{
		Name: "switchLine: the fold's clock not restarted by a switch", File: "switch.go",
		Edits: []edit{{Old: "\tc.fold.lastMono = mono\n", New: "\t_ = mono\n", Count: 1}},
		Run:   "^TestASwitchRestartsTheFoldClock$", Fast: true,
	},
	{
		Name: "Suspend: the old line not published again after a panic", File: "suspend.go",
		Edits: []edit{{Old: "\t\t\tc.publishLocked(before)\n\t\t\tc.recordFaultLocked(\"Suspend\"", New: "\t\t\t_ = before\n\t\t\tc.recordFaultLocked(\"Suspend\"", Count: 1}},
		Run:   "^TestAPanickingReadNeverWedgesAWriterPath$", Fast: true,
	},
	{
		Name: "switch: the current source's panic blamed on the new one", File: "switch.go",
		Edits: []edit{{Old: "case marked || same:", New: "case same:", Count: 1}},
		Run:   "^TestRegisterBlamesTheSourceThatPanicked$", Fast: true,
	},
	{
		Name: "switch: a panic of the same counter's Read blamed on an invalid Source", File: "switch.go",
		Edits: []edit{{Old: "case marked || same:", New: "case marked:", Count: 1}},
		Run:   "^TestASameCounterSwitchCountsItsFaults$", Fast: true,
	},
	{
		Name: "switch: a panic of the reference blamed on the counter", File: "switch.go",
		Edits: []edit{{Old: "case marked && f.reference:", New: "case false && f.reference:", Count: 1}},
		Run:   "^TestASameCounterSwitchCountsItsFaults$", Fast: true,
	},
	{
		Name: "Register: a refused Register drops the default clock's verdict", File: "trust.go",
		Edits: []edit{{Old: "c.track, p.verdict, p.rejected, p.pending = tr, verdict, rejected, pending", New: "c.track, p.rejected, p.pending = tr, rejected, pending; _ = verdict", Count: 1}},
		Run:   "^TestARefusedRegisterKeepsTheDefaultClocksChecks$", Fast: true,
	},
	{
		Name: "Info: waits for the writer lock", File: "schedclock.go",
		Edits: []edit{{Old: "\tif c.mu.TryLock() {", New: "\tif c.mu.Lock(); true {", Count: 1}},
		Run:   "^TestInfoNeverWaitsForABlockedReference$", Fast: true,
	},
	{
		Name: "default clock: the TSC trusted where the kernel's verdict is unknown", File: "default.go",
		Edits: []edit{{Old: "p.vouched = v.Known() && v.Current == v.Want", New: "p.vouched = !v.Known() || v.Current == v.Want", Count: 1}},
		Run:   "^TestTheTSCIsTrustedOnlyOnEvidence$", Fast: true,
	},
	{
		Name: "checkTrust: the TSC adopted after a cross-CPU check that did not run", File: "trust.go",
		Edits: []edit{{Old: "if err == nil && p.needsEvidence && rep.Verdict != warp.None {", New: "if err == nil && p.needsEvidence && rep.Verdict == warp.Found {", Count: 1}},
		Run:   "^TestAnUncheckedTSCIsNeverAdopted$", Fast: true,
	},
	{
		Name: "lostTrust: the counter's own evidence (a paravirtual page's stable bit) not followed", File: "trust.go",
		Edits: []edit{{Old: "if why := d.evidence(); why != \"\" {", New: "if why := d.evidence(); false && why != \"\" {", Count: 1}},
		Run:   "^TestTheCountersOwnEvidenceIsFollowedForLife$", Fast: true,
	},
	{
		Name: "refineLocked: an exact rate (a paravirtual page's nanoseconds) refined", File: "calibrate.go",
		Edits: []edit{{Old: "\tif c.rate.origin == RateNanoseconds {\n\t\treturn", New: "\tif false && c.rate.origin == RateNanoseconds {\n\t\treturn", Count: 1}},
		Run:   "^TestAnExactRateIsNeverRefined$", Fast: true,
	},
	{
		Name: "newConversion: rates converting more than 1 ppm off accepted", File: "clocksource.go",
		Edits: []edit{{Old: "math.Abs(e) > maxConversionPPM || math.IsNaN(e)", New: "math.IsNaN(e)", Count: 1}},
		Run:   "^TestRatesConvertWithinOnePPM$", Fast: true,
	},
	{
		Name: "wallSegment.wallAt: no saturation", File: "wall.go",
		Edits: []edit{{Old: "\treturn addSat(addSat(g.wall, d), mulShift32(d, g.slope))", New: "\treturn g.wall + d + mulShift32(d, g.slope)", Count: 1}},
		Run:   "^TestTimeNeverWraps$", Fast: true,
	},
	{
		Name: "Manual.add: a 64-bit counter not held below the negative zone", File: "manual.go",
		Edits: []edit{{Old: "if next < v || next > top {", New: "if next < v {", Count: 1}},
		Run:   "^TestAdvanceNeverMovesBack$", Fast: true,
	},
	{
		Name: "options: a duplicate Option accepted", File: "options.go",
		Edits: []edit{{Old: "\tif o.seen[name] {", New: "\tif false {", Count: 1}},
		Run:   "^TestDuplicateOptionsAreRefused$", Fast: true,
	},
	{
		Name: "referenceOff: a misbehaving reference followed", File: "calibrate.go",
		Edits: []edit{{Old: "\tif abs(subSat(refElapsed, monoElapsed)) <= monoElapsed/1e6*refWitnessPPM+int64(refWitnessFloor) {", New: "\tif true {", Count: 1}},
		Run:   "^TestMisbehavingReferences$", Fast: true,
	},
	{
		Name: "readCNTVCT: no ISB before MRS (arm64)", File: "source_cntvct_arm64.s",
		Edits: []edit{{Old: "\tISB  $15 // the counter read cannot be performed before the earlier loads of the latch bank.\n", Count: 1}},
		Arch:  "arm64", Run: orderingTests,
		Unobservable: qemuInOrder,
	},
	{
		Name: "readCNTVCT: no dependent LDAR after MRS (arm64)", File: "source_cntvct_arm64.s",
		Edits: []edit{{Old: "\tLDAR (R1), R1    // orders every later load", New: "\t// LDAR (R1), R1    // orders every later load", Count: 1}},
		Arch:  "arm64", Run: orderingTests,
		Unobservable: qemuInOrder,
	},
	{
		Name: "readRDTIME: no FENCE before RDTIME (riscv64)", File: "source_rdtime_riscv64.s",
		Edits: []edit{{Old: "\tFENCE      // the time CSR read (device input) waits for the earlier loads of the latch bank.\n", Count: 1}},
		Arch:  "riscv64", Run: orderingTests,
		Unobservable: qemuTargetInOrder,
	},
	{
		Name: "readRDTIME: no FENCE after RDTIME (riscv64)", File: "source_rdtime_riscv64.s",
		Edits: []edit{{Old: "\tFENCE      // every later load, the seq re-check included, waits for the time CSR read.\n", Count: 1}},
		Arch:  "riscv64", Run: orderingTests,
		Unobservable: qemuTargetInOrder,
	},
	{
		Name: "readTimeBase: no ISYNC before mftb (ppc64le)", File: "source_timebase_ppc64le.s",
		Edits: []edit{{Old: "\tISYNC                // mftb waits until the earlier loads of the latch bank have completed.\n", Count: 1}},
		Arch:  "ppc64le", Run: orderingTests,
	},
	{
		Name: "readTimeBase: no acquire after mftb (ppc64le)", File: "source_timebase_ppc64le.s",
		Edits: []edit{{Old: "\tISYNC                // ...and isync: every later load", New: "\t// ISYNC                // ...and isync: every later load", Count: 1}},
		Arch:  "ppc64le", Run: orderingTests,
		Unobservable: qemuTargetInOrder,
	},
	{
		Name: "readTOD: no serialisation before STCKF (s390x)", File: "source_tod_s390x.s",
		Edits: []edit{{Old: "\tSYNC            // STCKF waits until the earlier loads of the latch bank have completed.\n", Count: 1}},
		Arch:  "s390x", Run: orderingTests,
		Unobservable: qemuTargetInOrder,
	},
	{
		Name: "readTOD: no serialisation after STCKF (s390x)", File: "source_tod_s390x.s",
		Edits: []edit{{Old: "\tSYNC            // every later load, the seq re-check included, waits for the clock value's store.\n", Count: 1}},
		Arch:  "s390x", Run: orderingTests,
		Unobservable: qemuTargetInOrder,
	},
	{
		Name: "readStableCounter: no DBAR before RDTIME.D (loong64)", File: "source_stablecounter_loong64.s",
		Edits: []edit{{Old: "\tDBAR    $0         // the earlier loads of the latch bank complete before the counter read.\n", Count: 1}},
		Arch:  "loong64", Run: orderingTests,
		Unobservable: qemuLoongHostCounter,
	},
	{
		Name: "readStableCounter: no DBAR after the dependent load (loong64)", File: "source_stablecounter_loong64.s",
		Edits: []edit{{Old: "\tDBAR    $0         // every later load, the seq re-check included, waits for the dummy load.\n", Count: 1}},
		Arch:  "loong64", Run: orderingTests,
		Unobservable: qemuLoongHostCounter,
	},
	{
		Name: "vdso call: no 16-byte alignment of the C stack", File: "internal/vdso/call_linux_amd64.s", Pkg: "internal/vdso",
		Edits: []edit{{Old: "\tLEAQ (VDSO_FRAME-16)(SP), reg; \\\n\tANDQ $~15, reg\n", New: "\tLEAQ (VDSO_FRAME-16)(SP), reg\n", Count: 1}},
		Run:   "^TestABIProbe$", Fast: true,
	},
	{
		Name: "vdso call: C stack not moved onto the reserved frame", File: "internal/vdso/call_linux_amd64.s", Pkg: "internal/vdso",
		Edits: []edit{{Old: "\tMOVQ SI, SP            // move onto the reserved frame: the C function's pushes land inside it\n", Count: 1}},
		Run:   "^TestABIProbe$", Fast: true,
	},
	{
		Name: "vdso call: frame smaller than the C stack", File: "internal/vdso/call_linux_amd64.s", Pkg: "internal/vdso",
		Edits: []edit{{Old: "TEXT ·callClockGettime(SB), 0, $5120-28", New: "TEXT ·callClockGettime(SB), 0, $64-28", Count: 1}},
		Run:   "^TestABIProbe$", Fast: true,
	},
	{
		Name: "vdso call: Go SP kept in a caller-saved register", File: "internal/vdso/call_linux_amd64.s", Pkg: "internal/vdso",
		Edits: []edit{
			{Old: "\tMOVQ SP, R12           // the Go SP", New: "\tMOVQ SP, R11           // the Go SP", Count: 1},
			{Old: "\tMOVQ R12, SP           // back on the Go SP", New: "\tMOVQ R11, SP           // back on the Go SP", Count: 1},
		},
		Run: "^TestABIProbe$",
	},
	{
		Name: "vdso call: frame without NO_LOCAL_POINTERS", File: "internal/vdso/call_linux_amd64.s", Pkg: "internal/vdso",
		Edits:        []edit{{Old: "TEXT ·callClockGettime(SB), 0, $5120-28\n\tNO_LOCAL_POINTERS\n", New: "TEXT ·callClockGettime(SB), 0, $5120-28\n", Count: 1}},
		Run:          "^(TestProfileUnderLoad|TestSignalStorm)$",
		Unobservable: "no stack walk that needs the frame's pointer map reaches it: the goroutine cannot stop inside an assembly function past its prologue (isAsyncSafePoint refuses FuncFlagAsm), and at the prologue's morestack call the frame has no locals yet",
	},
	{
		Name: "vdso call (arm64): no g store in the g slot", File: "internal/vdso/call_linux_arm64.s", Pkg: "internal/vdso",
		Edits: []edit{{Old: "\tMOVD g, (R22); \\\n", Count: 1}},
		Arch:  "arm64", Run: "^TestABIProbe$",
	},
	{
		Name: "vdso call (arm64): g slot not cleared", File: "internal/vdso/call_linux_arm64.s", Pkg: "internal/vdso",
		Edits: []edit{{Old: "\tCBZ  R22, 2(PC); \\\n\tMOVD ZR, (R22)\n", New: "\tCBZ  R22, 2(PC); \\\n\tMOVD R22, R22\n", Count: 1}},
		Arch:  "arm64", Run: "^TestABIProbe$",
	},
	{
		Name: "vdso call (arm64): no 16-byte alignment of the C stack", File: "internal/vdso/call_linux_arm64.s", Pkg: "internal/vdso",
		Edits: []edit{{Old: "\tADD $(VDSO_FRAME+8-16), RSP, reg; \\\n\tBIC $15, reg\n", New: "\tADD $(VDSO_FRAME+8-16), RSP, reg\n", Count: 1}},
		Arch:  "arm64", Run: "^TestABIProbe$",
	},
	{
		Name: "vdso call (arm64): C stack not moved onto the reserved frame", File: "internal/vdso/call_linux_arm64.s", Pkg: "internal/vdso",
		Edits: []edit{{Old: "\tMOVD R1, RSP           // move onto the reserved frame: the C function's stack grows down inside it\n", Count: 1}},
		Arch:  "arm64", Run: "^TestABIProbe$",
	},
	{
		Name: "vdso g slot check (arm64): stack bounds not compared", File: "internal/vdso/call_linux_arm64.go", Pkg: "internal/vdso",
		Edits: []edit{{Old: "\tcase lo != ss.sp || hi-lo != ss.size:", New: "\tcase false:", Count: 1}},
		Arch:  "arm64", Run: "^TestCompareSignalStack$",
	},
	{
		Name: "vdso lookup: symbol index unbounded", File: "internal/vdso/elf.go", Pkg: "internal/vdso",
		Edits: []edit{{Old: "\tif i >= img.symCount {\n", New: "\tif false {\n", Count: 1}},
		Run:   "^TestLookupIsTotal$", Fast: true,
	},
	{
		Name: "vdso lookup: SysV hash tables unbounded", File: "internal/vdso/elf.go", Pkg: "internal/vdso",
		Edits: []edit{{Old: "\tif !span(img.data, img.buckets, 4*(nbucket+nchain)) {", New: "\tif false {", Count: 1}},
		Run:   "^TestLookupIsTotal$", Fast: true,
	},
	{
		Name: "vdso lookup: a symbol outside executable code accepted", File: "internal/vdso/elf.go", Pkg: "internal/vdso",
		Edits: []edit{{Old: "\treturn 0, false, malformed(\"%s at %#x outside every executable segment\", sym, value)", New: "\treturn off, true, nil", Count: 1}},
		Run:   "^TestLookupRefusals$", Fast: true,
	},
	{
		Name: "vdso image: program headers not bounded to the first page", File: "internal/vdso/image_linux.go", Pkg: "internal/vdso",
		Edits: []edit{{Old: "phoff > minPage || phnum*phentsize > minPage-phoff", New: "false", Count: 1}},
		Run:   "^TestImageLength$", Fast: true,
	},
	{
		Name: "pvclock Read: no version re-check", File: "internal/pvclock/reader_amd64.s", Pkg: "internal/pvclock",
		Edits: []edit{{Old: "\tCMPL R9, PV_VERSION(DI)(SI*1)\n\tJNE  again\n", Count: 1}},
		Run:   "^TestAsmReaderOnASyntheticPage$", Fast: true,
	},
	{
		Name: "pvclock Read: no odd check (version not masked)", File: "internal/pvclock/reader_amd64.s", Pkg: "internal/pvclock",
		Edits: []edit{{Old: "\tANDL    $~1, R9\n", Count: 1}},
		Run:   "^TestAsmReaderOnASyntheticPage$", Fast: true,
	},
	{
		Name: "pvclock Read: stable bit ignored", File: "internal/pvclock/reader_amd64.s", Pkg: "internal/pvclock",
		Edits: []edit{{Old: "\tTESTB   $PV_STABLE, PV_FLAGS(DI)\n\tJEQ     fail\n", Count: 1}},
		Run:   "^TestAsmReader(OnASyntheticPage|MatchesGoReader)$", Fast: true,
	},
	{
		Name: "pvclock ReadWith: no version re-check", File: "internal/pvclock/page.go", Pkg: "internal/pvclock",
		Edits: []edit{{Old: "\t\tif pg.version.Load() == version {", New: "\t\tif _ = version; true {", Count: 1}},
		Run:   "^TestGoReaderFollowsEveryUpdate$", Fast: true,
	},
	{
		Name: "pvclock ReadWith: no odd check (version not masked)", File: "internal/pvclock/page.go", Pkg: "internal/pvclock",
		Edits: []edit{{Old: "\t\tversion := pg.version.Load() &^ 1\n", New: "\t\tversion := pg.version.Load()\n", Count: 1}},
		Run:   "^TestGoReaderFollowsEveryUpdate$", Fast: true,
	},
	{
		Name: "pvclock ReadWith: stable bit ignored", File: "internal/pvclock/page.go", Pkg: "internal/pvclock",
		Edits: []edit{{Old: "\t\tif uint8(sf>>8)&TSCStableBit == 0 {", New: "\t\tif false {", Count: 1}},
		Run:   "^TestGoReaderFollowsEveryUpdate$", Fast: true,
	},
	{
		Name: "pvclock ReadWith: tries unbounded", File: "internal/pvclock/page.go", Pkg: "internal/pvclock",
		Edits: []edit{{Old: "\tfor range maxTries {\n\t\tversion :=", New: "\tfor range 1 << 20 {\n\t\tversion :=", Count: 1}},
		Run:   "^TestGoReaderGivesUpOnAStuckWriter$", Fast: true,
	},
	{
		Name: "hyperv ReadWith: no sequence re-check", File: "internal/pvclock/hyperv.go", Pkg: "internal/pvclock",
		Edits: []edit{{Old: "\t\tif pg.sequence.Load() == sequence {", New: "\t\tif true {", Count: 1}},
		Run:   "^TestHypervReaderFollowsEveryUpdate$", Fast: true,
	},
	{
		Name: "hyperv ReadWith: an invalid page (sequence 0) read", File: "internal/pvclock/hyperv.go", Pkg: "internal/pvclock",
		Edits: []edit{{Old: "\t\tif sequence == 0 {", New: "\t\tif false {", Count: 1}},
		Run:   "^TestHypervReaderFollowsEveryUpdate$", Fast: true,
	},
	{
		Name: "Paravirt: back on the page after a fallback", File: "source_pvclock.go",
		Edits: []edit{{Old: "\t\ts.fellBack.Store(true)\n", Count: 1}},
		Run:   "^TestParavirt(NeverGoesBackToThePage|FallsBackWhenTheStableBitClears)$", Fast: true,
	},
	{
		Name: "clockNow: the pvclock page read inline without the stable bit", File: "now_amd64.s",
		Edits: []edit{{Old: "\tTESTB   $1, 29(BX) // PVCLOCK_TSC_STABLE_BIT in flags\n\tJEQ     otherGo\n", Count: 1}},
		Run:   "^TestNowLeaves(AnUnstablePage|APageUnderUpdate)$", Fast: true,
	},
	{
		Name: "clockNow: the pvclock page read inline without the odd check", File: "now_amd64.s",
		Edits: []edit{{Old: "\tANDL    $~1, R12 // pvclock_read_begin: an odd version (update in flight) cannot match the re-check\n", Count: 1}},
		Run:   "^TestNowLeaves(AnUnstablePage|APageUnderUpdate)$", Fast: true,
	},
	{
		Name: "clockNow: the pvclock page read inline without the version re-check", File: "now_amd64.s",
		Edits: []edit{{Old: "\tCMPL R12, 0(BX)(R10*1) // pvclock_read_retry\n\tJNE  otherGo\n", Count: 1}},
		Run:   "^TestNowLeaves(AnUnstablePage|APageUnderUpdate)$", Fast: true,
	},
}

type outcome struct {
	m        mutation
	status   string
	killedBy string
	evidence string
	failed   bool // counts against the run
	output   string
}

func main() {
	fast := flag.Bool("fast", os.Getenv("MUTANTS") == "fast", "run only the CI subset")
	only := flag.String("only", "", "run only the mutations whose name matches this regexp")
	verbose := flag.Bool("v", false, "print the test output of mutations that survive or fail to build")
	timeout := flag.Duration("timeout", 10*time.Minute, "limit for one go test run")
	check := flag.Bool("check", false, "only check that every mutation's edits apply to the tree (after code moved), running no test")
	flag.Parse()
	if *check {
		if err := checkPatterns(); err != nil {
			fmt.Fprintln(os.Stderr, "mutants:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*fast, *only, *verbose, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(1)
	}
}

func run(fast bool, only string, verbose bool, timeout time.Duration) error {
	var sel []mutation
	onlyRE, err := regexp.Compile(only)
	if err != nil {
		return err
	}
	for _, m := range mutations {
		if (fast && !m.Fast) || !onlyRE.MatchString(m.Name) {
			continue
		}
		sel = append(sel, m)
	}
	if len(sel) == 0 {
		return errors.New("no mutation selected")
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "schedclock-mutants-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if err := copyTree(root, work); err != nil {
		return err
	}
	fmt.Printf("mutants: %d mutations, in a copy at %s\n", len(sel), work)

	// The unmutated tests must pass, or a failure proves nothing.
	baseline := map[string]bool{}
	for _, m := range sel {
		key := m.Arch + " " + m.Pkg + " " + m.Run
		if baseline[key] {
			continue
		}
		baseline[key] = true
		if skip := archSkip(m.Arch); skip != "" {
			continue
		}
		out, err := goTest(work, m, timeout)
		if err != nil {
			return fmt.Errorf("the unmutated tests fail (GOARCH=%s go test -run %q): %v\n%s", archName(m.Arch), m.Run, err, out)
		}
		if strings.Contains(out, "no tests to run") {
			return fmt.Errorf("-run %q selects no test", m.Run)
		}
	}

	var results []outcome
	for _, m := range sel {
		o := apply(work, m, timeout)
		results = append(results, o)
		fmt.Printf("  %-50s %s\n", m.Name, o.status)
	}

	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MUTATION\tFILE\tARCH\tRESULT\tKILLED BY\tEVIDENCE")
	bad := 0
	for _, o := range results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", o.m.Name, o.m.File, archName(o.m.Arch), o.status, o.killedBy, o.evidence)
		if o.failed {
			bad++
		}
	}
	tw.Flush()
	for _, o := range results {
		if counts := countLines(o.output); counts != "" {
			fmt.Printf("\n%s: what the tests saw:\n%s", o.m.Name, counts)
		}
	}
	for _, o := range results {
		if o.m.Unobservable != "" && strings.HasPrefix(o.status, "survived") {
			fmt.Printf("\n%s: not observable here: %s\n", o.m.Name, o.m.Unobservable)
		}
		if verbose && o.failed {
			fmt.Printf("\n--- output for %s:\n%s\n", o.m.Name, o.output)
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d mutations not killed or not applied (see the table)", bad, len(results))
	}
	return nil
}

// checkPatterns reports every mutation whose file is missing or whose
// edits do not occur as many times as they say, in the tree as it is.
func checkPatterns() error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	var bad []string
	for _, m := range mutations {
		orig, err := os.ReadFile(filepath.Join(root, m.File))
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", m.Name, err))
			continue
		}
		for _, e := range m.Edits {
			if n := strings.Count(string(orig), e.Old); n != e.Count {
				bad = append(bad, fmt.Sprintf("%s (%s): %q occurs %d times, want %d", m.Name, m.File, e.Old, n, e.Count))
			}
		}
	}
	if len(bad) > 0 {
		return errors.New("patterns that no longer apply:\n" + strings.Join(bad, "\n"))
	}
	fmt.Printf("mutants: the edits of all %d mutations apply\n", len(mutations))
	return nil
}

// apply mutates m's file in the copy, runs its tests and restores it.
func apply(work string, m mutation, timeout time.Duration) outcome {
	o := outcome{m: m}
	if skip := archSkip(m.Arch); skip != "" {
		o.status = "not run: " + skip // said in the table, not a failure of this host
		return o
	}
	path := filepath.Join(work, m.File)
	orig, err := os.ReadFile(path)
	if err != nil {
		o.status, o.failed = "file missing: "+err.Error(), true
		return o
	}
	mutated := string(orig)
	for _, e := range m.Edits {
		if n := strings.Count(mutated, e.Old); n != e.Count {
			o.status, o.failed = fmt.Sprintf("PATTERN MISMATCH: %q occurs %d times, want %d", e.Old, n, e.Count), true
			return o
		}
		mutated = strings.ReplaceAll(mutated, e.Old, e.New)
	}
	if err := os.WriteFile(path, []byte(mutated), 0o644); err != nil {
		o.status, o.failed = err.Error(), true
		return o
	}
	defer os.WriteFile(path, orig, 0o644)

	start := time.Now()
	out, err := goTest(work, m, timeout)
	o.output = out
	elapsed := time.Since(start).Round(time.Second)
	switch {
	case err == nil:
		if m.Unobservable != "" {
			o.status = "survived (expected)"
		} else {
			o.status, o.failed = "SURVIVED", true
		}
	case strings.Contains(out, "[build failed]") || strings.Contains(out, "[setup failed]") || strings.Contains(out, "vet:"):
		o.status, o.failed = "BUILD FAILED", true
	default:
		o.status = fmt.Sprintf("killed (%v)", elapsed)
		o.killedBy = failedTests(out)
		o.evidence = firstEvidence(out)
	}
	return o
}

// countRE matches the ordering tests' summaries: how many readings or
// handoffs they took and how many violations they saw.
var countRE = regexp.MustCompile(`(?m)^\s*\S+_test\.go:\d+: (.*(?:readings over|inversions in).*)$`)

// countLines returns the summaries in a go test output, one per line:
// those of the failing tests (go test prints no others without -v), and
// for a surviving mutation, run with -v, those of the hardware readers.
func countLines(out string) string {
	var b strings.Builder
	for _, m := range countRE.FindAllStringSubmatch(out, -1) {
		if strings.Contains(out, "\n=== RUN") && !strings.Contains(m[1], "smallest") && !strings.Contains(m[1], "/hw") && !strings.Contains(m[1], "unfenced") {
			continue
		}
		fmt.Fprintf(&b, "    %s\n", m[1])
	}
	return b.String()
}

var failRE = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)

// failedTests lists the deepest failing tests of a go test output.
func failedTests(out string) string {
	var names []string
	for _, m := range failRE.FindAllStringSubmatch(out, -1) {
		names = append(names, m[1])
	}
	var leaves []string
	for _, n := range names {
		leaf := true
		for _, o := range names {
			if o != n && strings.HasPrefix(o, n+"/") {
				leaf = false
			}
		}
		if leaf {
			leaves = append(leaves, n)
		}
	}
	if len(leaves) == 0 {
		if strings.Contains(out, "panic: test timed out") {
			return "(timeout)"
		}
		return "(no test named)"
	}
	if len(leaves) > 2 {
		leaves = append(leaves[:2], fmt.Sprintf("(+%d)", len(leaves)-2))
	}
	return strings.Join(leaves, " ")
}

var (
	messagesRE = regexp.MustCompile(`(?m)^\s*Messages:\s+(.*)$`)
	errorRE    = regexp.MustCompile(`(?m)^\s*Error:\s+(.*)$`)
)

// firstEvidence returns the first assertion message of a go test output,
// or the first error when no assertion carried a message.
func firstEvidence(out string) string {
	m := messagesRE.FindStringSubmatch(out)
	if m == nil {
		m = errorRE.FindStringSubmatch(out)
	}
	if m == nil {
		return ""
	}
	s := strings.TrimSpace(m[1])
	if len(s) > 110 {
		s = s[:110] + "..."
	}
	return s
}

func goTest(dir string, m mutation, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	args := []string{"test", "-count=1", "-timeout", timeout.String(), "-run", m.Run}
	if m.Unobservable != "" {
		args = append(args, "-v") // the passing tests' logs are the evidence
	}
	env := os.Environ()
	if m.Arch != "" && m.Arch != runtime.GOARCH {
		args = append(args, "-exec", emulators[m.Arch])
		env = append(env, "GOARCH="+m.Arch)
	}
	pkg := "."
	if m.Pkg != "" {
		pkg = "./" + m.Pkg
	}
	args = append(args, pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = env
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	return buf.String(), err
}

// archSkip says why mutations for arch cannot run here, or "".
func archSkip(arch string) string {
	switch {
	case arch == "" && runtime.GOARCH != "amd64":
		return "the TSC mutations need an amd64 host"
	case arch != "" && arch != runtime.GOARCH:
		if _, err := exec.LookPath(emulators[arch]); err != nil {
			return emulators[arch] + " not installed"
		}
	}
	return ""
}

// emulators names the user-mode qemu that runs each GOARCH's tests.
var emulators = map[string]string{
	"arm64":   "qemu-aarch64",
	"riscv64": "qemu-riscv64",
	"ppc64le": "qemu-ppc64le",
	"s390x":   "qemu-s390x",
	"loong64": "qemu-loongarch64",
}

func archName(arch string) string {
	if arch == "" {
		return runtime.GOARCH
	}
	return arch
}

func repoRoot() (string, error) {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("finding the repository root: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// copyTree copies the files git knows of (tracked, and untracked ones it
// does not ignore) from root to dst.
func copyTree(root, dst string) error {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("listing the repository's files: %w", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, name)
		info, err := os.Lstat(src)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // deleted in the working tree
			}
			return err
		}
		if !info.Mode().IsRegular() {
			continue
		}
		target := filepath.Join(dst, name)
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if err := copyFile(src, target, info.Mode()); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode.Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
