//go:build gc && !purego

package schedclock_test

import (
	"bytes"
	"debug/elf"
	"debug/gosym"
	"os"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A fenceRule says that in the function sym every instruction that reads
// the counter directly follows the barrier that orders it after the
// caller's earlier loads (the latch bank's, the page's).
type fenceRule struct {
	sym           string // the function, as the Go symbol table names it
	read, barrier insn
	reads         int // how many counter reads the function holds at least
}

// insn matches one instruction: the bytes at an offset (x86 and s390x,
// whose instructions vary in length), or a 32-bit word under a mask
// (the fixed-width ISAs, in the binary's byte order).
type insn struct {
	bytes       []byte
	word, mask  uint32
	description string
}

func (in insn) at(code []byte, i int, order elf.FileHeader) bool {
	if in.bytes != nil {
		return i >= 0 && bytes.HasPrefix(code[i:], in.bytes)
	}
	if i < 0 || i%4 != 0 || i+4 > len(code) {
		return false
	}
	return order.ByteOrder.Uint32(code[i:])&in.mask == in.word
}

func (in insn) len() int {
	if in.bytes != nil {
		return len(in.bytes)
	}
	return 4
}

// fenceRules are the counter readers of each architecture with assembly.
func fenceRules() map[string][]fenceRule {
	const root, pv = "github.com/schedclock/schedclock.", "github.com/schedclock/schedclock/internal/pvclock."
	rdtsc := insn{bytes: []byte{0x0f, 0x31}, description: "RDTSC"}
	lfence := insn{bytes: []byte{0x0f, 0xae, 0xe8}, description: "LFENCE"}
	return map[string][]fenceRule{
		"amd64": {
			{sym: root + "clockNow", read: rdtsc, barrier: lfence, reads: 2}, // the TSC line's and the pvclock page's
			{sym: root + "readTSC", read: rdtsc, barrier: lfence, reads: 1},
			{sym: pv + "Read", read: rdtsc, barrier: lfence, reads: 1},
			{sym: pv + "TSC", read: rdtsc, barrier: lfence, reads: 1},
		},
		"arm64": {{sym: root + "readCNTVCT", reads: 1,
			read:    insn{word: 0xd53be040, mask: 0xffffffe0, description: "MRS CNTVCT_EL0"},
			barrier: insn{word: 0xd5033fdf, mask: 0xffffffff, description: "ISB"}}},
		"ppc64le": {{sym: root + "readTimeBase", reads: 1,
			read:    insn{word: 0x7c0c42a6, mask: 0xfc1fffff, description: "mfspr 268 (mftb)"},
			barrier: insn{word: 0x4c00012c, mask: 0xffffffff, description: "isync"}}},
		"riscv64": {{sym: root + "readRDTIME", reads: 1,
			read:    insn{word: 0xc0102073, mask: 0xfffff07f, description: "RDTIME"},
			barrier: insn{word: 0x0000000f, mask: 0x0000707f, description: "FENCE"}}},
		"loong64": {{sym: root + "readStableCounter", reads: 1,
			read:    insn{word: 0x00006800, mask: 0xfffffc00, description: "RDTIME.D"},
			barrier: insn{word: 0x38720000, mask: 0xffff8000, description: "DBAR"}}},
		"s390x": {{sym: root + "readTOD", reads: 1,
			read:    insn{bytes: []byte{0xb2, 0x7c}, description: "STCKF"},
			barrier: insn{bytes: []byte{0x07, 0xe0}, description: "BCR 14,0 (SYNC)"}}},
	}
}

// TestCounterReadsAreFenced reads the machine code of this test binary's
// counter readers (from its own ELF file and Go symbol table) and requires every
// counter read in them to directly follow its barrier: LFENCE before
// RDTSC, ISB before MRS CNTVCT_EL0, isync before mftb, FENCE before
// RDTIME, DBAR before RDTIME.D, BCR 14,0 before STCKF. The cross-CPU
// tests (TestCrossCPUOrdering, TestReadersUnderBackToBackPublications)
// show what a barrier prevents, but only as often as the hardware
// reorders: without its LFENCE a reader goes back across CPUs in most
// runs, not in all, and an emulator that executes in order never shows
// it. This is the deterministic half of the proof: the barrier is in
// the code that runs.
func TestCounterReadsAreFenced(t *testing.T) {
	rules, ok := fenceRules()[runtime.GOARCH]
	if !ok {
		t.Skipf("no counter assembly on %s", runtime.GOARCH)
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	f, err := elf.Open(exe)
	if err != nil {
		t.Skipf("the test binary is not an ELF file this test can read (%s): %v", runtime.GOOS, err)
	}
	defer f.Close()
	// The functions' bounds come from the Go symbol table (.gopclntab),
	// which go test's stripped binaries keep, their code from .text.
	text, pcln := f.Section(".text"), f.Section(".gopclntab")
	require.NotNil(t, text, "no .text")
	require.NotNil(t, pcln, "no .gopclntab")
	textData, err := text.Data()
	require.NoError(t, err)
	pclnData, err := pcln.Data()
	require.NoError(t, err)
	table, err := gosym.NewTable(nil, gosym.NewLineTable(pclnData, text.Addr))
	require.NoError(t, err)
	for _, r := range rules {
		// An assembly function called from Go has two entries of its
		// name: its body and the ABI wrapper; both are checked.
		var bodies [][]byte
		for _, fn := range table.Funcs {
			if fn.Name == r.sym && fn.Entry >= text.Addr && fn.End <= text.Addr+uint64(len(textData)) {
				bodies = append(bodies, textData[fn.Entry-text.Addr:fn.End-text.Addr])
			}
		}
		require.NotEmpty(t, bodies, "no function %s in the test binary: fenceRules names a function that moved", r.sym)
		reads := 0
		for _, code := range bodies {
			for at := range code {
				if !r.read.at(code, at, f.FileHeader) {
					continue
				}
				reads++
				assert.True(t, r.barrier.at(code, at-r.barrier.len(), f.FileHeader), "%s: the %s at +%#x does not follow %s", r.sym, r.read.description, at, r.barrier.description)
			}
		}
		assert.GreaterOrEqual(t, reads, r.reads, "%s: %d %s found, want at least %d", r.sym, reads, r.read.description, r.reads)
		t.Logf("%s: %d %s, each after %s", r.sym, reads, r.read.description, r.barrier.description)
	}
}
