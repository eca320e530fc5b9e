package cpu

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cpuidKey is a CPUID input: leaf (EAX) and sub-leaf (ECX).
type cpuidKey struct{ leaf, subleaf uint32 }

// cpuidRegs is a CPUID output: EAX, EBX, ECX, EDX.
type cpuidRegs [4]uint32

// trap fills leaves the probe must not read: every bit set, so using one
// would pass every check and give an absurd rate.
var trap = cpuidRegs{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}

// recordedCPUID replays recorded leaves. Reading a leaf that was not
// recorded, or one listed in mustNotRead, fails the test.
func recordedCPUID(t *testing.T, leaves map[cpuidKey]cpuidRegs, mustNotRead []uint32) Func {
	return func(eax, ecx uint32) (a, b, c, d uint32) {
		for _, leaf := range mustNotRead {
			if eax == leaf {
				t.Errorf("CPUID(%#x, %#x) read, but it must not be", eax, ecx)
			}
		}
		regs, ok := leaves[cpuidKey{eax, ecx}]
		if !ok {
			t.Errorf("CPUID(%#x, %#x) read, but not recorded", eax, ecx)
			regs = trap
		}
		return regs[0], regs[1], regs[2], regs[3]
	}
}

// with returns a copy of base with some leaves replaced.
func with(base map[cpuidKey]cpuidRegs, changes map[cpuidKey]cpuidRegs) map[cpuidKey]cpuidRegs {
	out := make(map[cpuidKey]cpuidRegs, len(base)+len(changes))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range changes {
		out[k] = v
	}
	return out
}

// Vendor strings as CPUID returns them in EBX, EDX, ECX.
const (
	genu, inei, ntel = 0x756e6547, 0x49656e69, 0x6c65746e // "Genu" "ineI" "ntel"
	auth, enti, camd = 0x68747541, 0x69746e65, 0x444d4163 // "Auth" "enti" "cAMD"
	kvmk, vmkv, kvmM = 0x4b4d564b, 0x564b4d56, 0x0000004d // "KVMKVMKVM\0\0\0"
)

var (
	// Xeon Gold 6148 (Skylake-SP), bare metal: leaf 0x15 gives the
	// ratio 192/2 but no crystal; leaf 0x16 gives the 2400 MHz base.
	skylakeX = map[cpuidKey]cpuidRegs{
		{0x0, 0}:        {0x16, genu, ntel, inei},
		{0x1, 0}:        {0x00050654, 0x00400800, 0x7ffefbff, 0xbfebfbff},
		{0x15, 0}:       {2, 192, 0, 0},
		{0x16, 0}:       {2400, 3700, 100, 0},
		{0x80000000, 0}: {0x80000008, 0, 0, 0},
		{0x80000007, 0}: {0, 0, 0, 0x100},
	}

	// Core i7-1165G7 (Tiger Lake), bare metal: 38.4 MHz crystal × 146/2
	// = 2803.2 MHz, not a whole number of MHz. Leaf 0x16 is not
	// recorded: it must not be needed.
	tigerLake = map[cpuidKey]cpuidRegs{
		{0x0, 0}:        {0x1b, genu, ntel, inei},
		{0x1, 0}:        {0x000806c1, 0x00100800, 0x7ffafbbf, 0xbfebfbff},
		{0x15, 0}:       {2, 146, 38_400_000, 0},
		{0x80000000, 0}: {0x80000008, 0, 0, 0},
		{0x80000007, 0}: {0, 0, 0, 0x100},
	}

	// EPYC 7763 (Milan), bare metal: no leaf 0x15, invariant TSC, no
	// hypervisor.
	epycMetal = map[cpuidKey]cpuidRegs{
		{0x0, 0}:        {0x10, auth, camd, enti},
		{0x1, 0}:        {0x00a00f11, 0x00800800, 0x7ef8320b, 0x178bfbff},
		{0x40000000, 0}: trap,
		{0x40000010, 0}: trap,
		{0x80000000, 0}: {0x80000023, auth, camd, enti},
		{0x80000007, 0}: {0, 0x3b, 0, 0x6799},
	}

	// EPYC KVM guest with invtsc whose hypervisor stops at leaf
	// 0x40000001 (KVM's own max): the trap in 0x40000010 must not be
	// read.
	epycKVM = map[cpuidKey]cpuidRegs{
		{0x0, 0}:        {0x10, auth, camd, enti},
		{0x1, 0}:        {0x00a00f11, 0x00020800, 0xfef83203, 0x178bfbff},
		{0x40000000, 0}: {0x40000001, kvmk, vmkv, kvmM},
		{0x40000010, 0}: trap,
		{0x80000000, 0}: {0x80000021, auth, camd, enti},
		{0x80000007, 0}: {0, 0, 0, 0x100},
	}

	// The same guest where QEMU exposes the timing leaf (vmware-cpuid-freq):
	// 2994374 kHz TSC, 1 GHz APIC bus.
	epycKVMFreq = with(epycKVM, map[cpuidKey]cpuidRegs{
		{0x40000000, 0}: {0x40000010, kvmk, vmkv, kvmM},
		{0x40000010, 0}: {2_994_374, 1_000_000, 0, 0},
	})

	// A Tiger Lake KVM guest exposing both leaf 0x15 and the timing
	// leaf: leaf 0x15 comes first.
	tigerLakeKVM = with(tigerLake, map[cpuidKey]cpuidRegs{
		{0x1, 0}:        {0x000806c1, 0x00100800, 0xfffafbbf, 0xbfebfbff},
		{0x40000000, 0}: trap,
		{0x40000010, 0}: trap,
	})

	// A Tiger Lake KVM guest whose leaf 0x15 enumerates no ratio
	// (EBX = 0): the timing leaf is next.
	tigerLakeKVMNoRatio = with(tigerLakeKVM, map[cpuidKey]cpuidRegs{
		{0x15, 0}:       {0, 0, 0, 0},
		{0x40000000, 0}: {0x40000010, kvmk, vmkv, kvmM},
		{0x40000010, 0}: {2_803_200, 1_000_000, 0, 0},
	})

	// The Intel KVM guest these tests were written on (leaves read with CPUID):
	// leaves 0x15 and 0x16 exist but are zero, the hypervisor stops at
	// 0x40000001 and leaf 0x40000010 holds a stale non-zero word.
	intelKVMHere = map[cpuidKey]cpuidRegs{
		{0x0, 0}:        {0x24, genu, ntel, inei},
		{0x1, 0}:        {0x000a0671, 0x01020800, 0xfffa3203, 0x1f8bfbff},
		{0x15, 0}:       {0, 0, 0, 0},
		{0x16, 0}:       {0, 0, 0, 0},
		{0x40000000, 0}: {0x40000001, kvmk, vmkv, kvmM},
		{0x40000010, 0}: {0, 0x00070001, 0, 0},
		{0x80000000, 0}: {0x80000008, 0, 0, 0},
		{0x80000007, 0}: {0, 0, 0, 0x100},
	}

	// Core 2 Duo E8400, bare metal: TSC present but not invariant.
	core2 = map[cpuidKey]cpuidRegs{
		{0x0, 0}:        {0xd, genu, ntel, inei},
		{0x1, 0}:        {0x0001067a, 0x00020800, 0x0408e3fd, 0xbfebfbff},
		{0x80000000, 0}: {0x80000008, 0, 0, 0},
		{0x80000007, 0}: {0, 0, 0, 0},
	}
)

func TestTSCRate(t *testing.T) {
	tests := []struct {
		name        string
		leaves      map[cpuidKey]cpuidRegs
		mustNotRead []uint32
		wantRate    uint64
		wantFrom    RateSource
		wantErrPPM  float64
		wantRefusal *Refusal
	}{
		{
			name: "Skylake-X: crystal from leaf 0x16", leaves: skylakeX,
			wantRate: 2_400_000_000, wantFrom: RateCrystal, wantErrPPM: 50 + 0.5e6/2400,
		},
		{
			name: "Tiger Lake: 38.4 MHz crystal, not a whole MHz", leaves: tigerLake,
			wantRate: 2_803_200_000, wantFrom: RateCrystal, wantErrPPM: 50,
		},
		{
			name:     "24 MHz crystal × 216/2",
			leaves:   with(tigerLake, map[cpuidKey]cpuidRegs{{0x15, 0}: {2, 216, 24_000_000, 0}}),
			wantRate: 2_592_000_000, wantFrom: RateCrystal, wantErrPPM: 50,
		},
		{
			// 25 MHz × 317 / 3 = 2641666666.67 Hz: dividing first
			// would give 2625 MHz, rounding to MHz 2642 MHz.
			name:     "multiply before divide, never rounded",
			leaves:   with(tigerLake, map[cpuidKey]cpuidRegs{{0x15, 0}: {3, 317, 25_000_000, 0}}),
			wantRate: 2_641_666_666, wantFrom: RateCrystal, wantErrPPM: 50,
		},
		{
			name: "leaf 0x15 without crystal and no leaf 0x16: measured",
			leaves: with(skylakeX, map[cpuidKey]cpuidRegs{
				{0x0, 0}:  {0x15, genu, ntel, inei},
				{0x16, 0}: trap,
			}),
			mustNotRead: []uint32{0x16},
			wantFrom:    RateUnknown,
		},
		{
			name:     "leaf 0x16 reserved bits 31:16 ignored",
			leaves:   with(skylakeX, map[cpuidKey]cpuidRegs{{0x16, 0}: {0xabcd0000 | 2400, 3700, 100, 0}}),
			wantRate: 2_400_000_000, wantFrom: RateCrystal, wantErrPPM: 50 + 0.5e6/2400,
		},
		{
			name:     "leaf 0x16 base frequency 0: measured",
			leaves:   with(skylakeX, map[cpuidKey]cpuidRegs{{0x16, 0}: {0, 0, 0, 0}}),
			wantFrom: RateUnknown,
		},
		{
			name: "EPYC bare metal: no leaf 0x15, invariant: measured", leaves: epycMetal,
			mustNotRead: []uint32{0x15, 0x16, 0x40000000, 0x40000010},
			wantFrom:    RateUnknown,
		},
		{
			name: "EPYC KVM guest, hypervisor max leaf 0x40000001: measured", leaves: epycKVM,
			mustNotRead: []uint32{0x40000010},
			wantFrom:    RateUnknown,
		},
		{
			name: "Intel KVM guest recorded here: measured", leaves: intelKVMHere,
			mustNotRead: []uint32{0x40000010},
			wantFrom:    RateUnknown,
		},
		{
			name: "EPYC KVM guest with timing leaf", leaves: epycKVMFreq,
			wantRate: 2_994_374_000, wantFrom: RateHypervisor, wantErrPPM: 0.5e6 / 2_994_374,
		},
		{
			name: "KVM guest: leaf 0x15 before the timing leaf", leaves: tigerLakeKVM,
			mustNotRead: []uint32{0x40000000, 0x40000010},
			wantRate:    2_803_200_000, wantFrom: RateCrystal, wantErrPPM: 50,
		},
		{
			name: "KVM guest: leaf 0x15 without ratio, timing leaf next", leaves: tigerLakeKVMNoRatio,
			wantRate: 2_803_200_000, wantFrom: RateHypervisor, wantErrPPM: 0.5e6 / 2_803_200,
		},
		{
			name: "Core 2: no invariant TSC", leaves: core2,
			wantRefusal: &Refusal{Reason: "no invariant TSC (CPUID 0x80000007 EDX bit 8 clear)"},
		},
		{
			name:        "KVM guest without invtsc",
			leaves:      with(epycKVMFreq, map[cpuidKey]cpuidRegs{{0x80000007, 0}: {0, 0, 0, 0}}),
			mustNotRead: []uint32{0x40000000, 0x40000010},
			wantRefusal: &Refusal{Reason: "no invariant TSC (CPUID 0x80000007 EDX bit 8 clear)"},
		},
		{
			name: "max extended leaf below 0x80000007",
			leaves: with(core2, map[cpuidKey]cpuidRegs{
				{0x80000000, 0}: {0x80000004, 0, 0, 0},
				{0x80000007, 0}: trap,
			}),
			mustNotRead: []uint32{0x80000007},
			wantRefusal: &Refusal{Reason: "no invariant TSC (CPUID max extended leaf 0x80000004 < 0x80000007)"},
		},
		{
			name:        "no TSC at all",
			leaves:      with(core2, map[cpuidKey]cpuidRegs{{0x1, 0}: {0x0001067a, 0x00020800, 0x0408e3fd, 0xbfebfbef}}),
			mustNotRead: []uint32{0x80000000, 0x80000007},
			wantRefusal: &Refusal{Absent: true, Reason: "no TSC (CPUID 1 EDX bit 4 clear)"},
		},
		{
			name:        "no CPUID leaf 1",
			leaves:      map[cpuidKey]cpuidRegs{{0x0, 0}: {0, genu, ntel, inei}, {0x1, 0}: trap},
			mustNotRead: []uint32{0x1},
			wantRefusal: &Refusal{Absent: true, Reason: "CPUID leaf 1 not available (max basic leaf 0x0)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tsc, refusal := InvariantTSC(recordedCPUID(t, tt.leaves, tt.mustNotRead))
			if tt.wantRefusal != nil {
				require.NotNil(t, refusal)
				assert.Equal(t, *tt.wantRefusal, *refusal)
				return
			}
			require.Nil(t, refusal)
			rate, from, errPPM := tsc.Rate()
			assert.Equal(t, tt.wantRate, rate)
			assert.Equal(t, tt.wantFrom, from)
			assert.InDelta(t, tt.wantErrPPM, errPPM, 1e-9)
		})
	}
}

func TestMulDiv(t *testing.T) {
	tests := []struct {
		a, b, c uint64
		want    uint64
		wantOK  bool
	}{
		{25_000_000, 317, 3, 2_641_666_666, true},
		{1 << 40, 1 << 40, 1 << 30, 1 << 50, true}, // the product needs 81 bits
		{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), true},
		{^uint64(0), 2, 1, 0, false}, // quotient needs 65 bits
		{1, 1, 0, 0, false},
	}
	for _, tt := range tests {
		got, ok := mulDiv(tt.a, tt.b, tt.c)
		assert.Equal(t, tt.wantOK, ok, "mulDiv(%d, %d, %d)", tt.a, tt.b, tt.c)
		assert.Equal(t, tt.want, got, "mulDiv(%d, %d, %d)", tt.a, tt.b, tt.c)
	}
}

// TestCPUID checks the CPUID wiring: arguments in, four registers out.
func TestCPUID(t *testing.T) {
	if !Supported {
		a, b, c, d := CPUID(0, 0)
		assert.Equal(t, [4]uint32{}, [4]uint32{a, b, c, d}, "no CPUID in this build")
		return
	}
	maxBasic, _, _, _ := CPUID(0, 0)
	require.GreaterOrEqual(t, maxBasic, uint32(1))
	_, _, _, featEDX := CPUID(1, 0)
	assert.NotZero(t, featEDX&featEDXTSC, "every amd64 CPU has a TSC")
	maxExtended, _, _, _ := CPUID(0x80000000, 0)
	assert.GreaterOrEqual(t, maxExtended, uint32(0x80000001), "every amd64 CPU has the long-mode leaf")
	// Leaf 0xB echoes the sub-leaf in ECX bits 7:0, which proves ECX is
	// passed.
	if maxBasic >= 0xb {
		if _, ebx, _, _ := CPUID(0xb, 0); ebx != 0 {
			_, _, ecx, _ := CPUID(0xb, 1)
			assert.Equal(t, uint32(1), ecx&0xff, "CPUID(0xb, 1) did not see sub-leaf 1")
		}
	}
}

func TestHasRDTSCP(t *testing.T) {
	// Leaf 0x80000001 as Zen 3 parts give it: EDX bit 27 set.
	epyc := with(epycMetal, map[cpuidKey]cpuidRegs{{0x80000001, 0}: {0x00a00f11, 0x40000000, 0x75c237ff, 0x2fd3fbff}})
	assert.True(t, HasRDTSCP(recordedCPUID(t, epyc, nil)))
	noRDTSCP := with(epyc, map[cpuidKey]cpuidRegs{{0x80000001, 0}: {0x00a00f11, 0x40000000, 0x75c237ff, 0x27d3fbff}})
	assert.False(t, HasRDTSCP(recordedCPUID(t, noRDTSCP, nil)))
	old := map[cpuidKey]cpuidRegs{{0x80000000, 0}: {0x80000000, 0, 0, 0}, {0x80000001, 0}: trap}
	assert.False(t, HasRDTSCP(recordedCPUID(t, old, []uint32{0x80000001})), "no leaf 0x80000001 to ask")
	t.Logf("this CPU has RDTSCP: %v", HasRDTSCP(CPUID))
}

func TestEmulated(t *testing.T) {
	emulated := Emulated()
	t.Logf("under user-mode emulation: %v (GOARCH=%s)", emulated, runtime.GOARCH)
	if runtime.GOARCH == "amd64" || runtime.GOARCH == "386" {
		assert.False(t, emulated, "an x86 build is never taken for an emulated one")
	}
}
