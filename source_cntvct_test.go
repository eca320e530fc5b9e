package schedclock

import (
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/errata"
)

// mono is the tests' portable read: Go's monotonic clock in ns.
func mono() uint64 { return uint64(time.Since(monoBase)) }

var monoBase = time.Now()

// assertCountsForwards reads read many times on one thread and checks
// that it never goes backwards and does advance.
func assertCountsForwards(t *testing.T, name string, read func() uint64) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	first := read()
	prev := first
	for i := 0; i < 200_000; i++ {
		now := read()
		if now < prev {
			t.Fatalf("%s went backwards on one thread: %d after %d (read %d)", name, now, prev, i)
		}
		prev = now
	}
	assert.Greater(t, prev, first, "%s did not advance", name)
}

// slowRead costs about 2 µs, like a read the kernel traps and emulates
// with a retrying workaround.
func slowRead() uint64 {
	start := mono()
	for mono()-start < 2000 {
	}
	return mono()
}

func TestMeasureReadCost(t *testing.T) {
	cost := measureReadCost(slowRead, mono)
	t.Logf("slow read %.1f ns, portable %.1f ns", cost.CounterNs, cost.PortableNs)
	assert.GreaterOrEqual(t, cost.CounterNs, 2000.0)
	assert.Less(t, cost.PortableNs, cost.CounterNs)
	assert.True(t, cost.counterSlower())

	cost = measureReadCost(func() uint64 { return 42 }, mono)
	t.Logf("constant %.1f ns, portable %.1f ns", cost.CounterNs, cost.PortableNs)
	assert.False(t, cost.counterSlower(), "a function that does nothing is not slower than a clock read")
	assert.Greater(t, cost.PortableNs, 0.0)

	// The hardware counters of this build, for the record.
	for name, read := range map[string]func() uint64{"tsc": tscReader(), "cntvct": cntvctReader()} {
		if read != nil {
			cost := measureReadCost(read, mono)
			t.Logf("%s on %s: read %.1f ns, portable %.1f ns", name, runtime.GOARCH, cost.CounterNs, cost.PortableNs)
		}
	}
}

func TestMeasureReadCostIsBounded(t *testing.T) {
	calls := 0
	cost := measureReadCost(func() uint64 {
		calls++
		start := mono()
		for mono()-start < 200_000 { // 200 µs: a pathological read
		}
		return 0
	}, mono)
	assert.GreaterOrEqual(t, cost.CounterNs, 200_000.0)
	assert.Equal(t, costMinBatches*costBatchReads, calls, "stops after the minimum once the budget is spent")
}

func TestMedian(t *testing.T) {
	assert.Equal(t, 0.0, median(nil))
	assert.Equal(t, 3.0, median([]float64{5, 3, 1}))
	assert.Equal(t, 2.5, median([]float64{4, 1, 3, 2}))
}

// fakeReaders binds each erratum to a fake read the test can recognise.
var fakeReaders = map[errata.Erratum]func() uint64{
	errata.None:               func() uint64 { return 0 },
	errata.FSLA008585:         func() uint64 { return 1 },
	errata.HiSilicon161010101: func() uint64 { return 2 },
	errata.ARM858921:          func() uint64 { return 3 },
	errata.Sun50iUnknown1:     func() uint64 { return 4 },
}

func fakeReader(e errata.Erratum) func() uint64 { return fakeReaders[e] }

func fixedCost(counter, portable float64) func(func() uint64) readCost {
	return func(func() uint64) readCost { return readCost{CounterNs: counter, PortableNs: portable} }
}

// TestCheckCNTVCTOnEachErratum: what internal/errata found (here, what
// it finds in its fixtures) picks the read, the cost decides, and Info
// says both.
func TestCheckCNTVCTOnEachErratum(t *testing.T) {
	tests := []struct {
		fixture           string
		match             errata.Match
		counter, portable float64
		fallback          bool
		say               string
	}{
		{"clean-rpi4", errata.Match{}, 9.5, 24, false,
			"cntvct: no erratum; read 9.5 ns, portable 24 ns"},
		// A trapping kernel with the 858921 workaround: two trapped reads
		// against a vDSO turned into a system call.
		{"amlogic-s922x", errata.Match{Erratum: errata.ARM858921, Where: "MIDR_EL1 0x410fd092 (cpu2)"}, 410, 520, false,
			"cntvct: ARM erratum 858921 (MIDR_EL1 0x410fd092 (cpu2)), kernel's workaround read: reads twice, keeps the first if bit 32 changed; read 410 ns, portable 520 ns"},
		// A trapping kernel with A-008585: the retry loop over trapped
		// reads is far slower than the system call.
		{"fsl-ls1043a", errata.Match{Erratum: errata.FSLA008585, Where: "device tree /timer: fsl,erratum-a008585"}, 2.9e4, 480, true,
			"cntvct: Freescale erratum A-008585 (device tree /timer: fsl,erratum-a008585), kernel's workaround read: reads twice until both agree (at most 200 times); read 29 µs, portable 480 ns: slower than the portable source (the kernel traps the counter?), falling back to it"},
		{"hisi-hip07-acpi", errata.Match{Erratum: errata.HiSilicon161010101, Where: "ACPI GTDT OEM HISI HIP07"}, 33, 60, false,
			"cntvct: HiSilicon erratum 161010101 (ACPI GTDT OEM HISI HIP07), kernel's workaround read: reads twice until the second is less than 32 past the first (at most 50 times); read 33 ns, portable 60 ns"},
		{"allwinner-a64", errata.Match{Erratum: errata.Sun50iUnknown1, Where: "device tree /timer: allwinner,erratum-unknown1"}, 15, 140, false,
			"cntvct: Allwinner erratum UNKNOWN1 (device tree /timer: allwinner,erratum-unknown1), kernel's workaround read: reads until bits 8:0 are neither all ones nor all zeros (at most 150 times); read 15 ns, portable 140 ns"},
		// No erratum the kernel names, and still trapped (a hypervisor's
		// paravirtual time, say): the cost decides alone.
		{"ampere-altra-acpi", errata.Match{}, 350, 40, true,
			"cntvct: no erratum; read 350 ns, portable 40 ns: slower than the portable source (the kernel traps the counter?), falling back to it"},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			trust := checkCNTVCTOn(tt.match, fakeReader, fixedCost(tt.counter, tt.portable))
			assert.Equal(t, tt.match.Erratum, trust.Match.Erratum)
			assert.Equal(t, tt.fallback, trust.Fallback)
			assert.Equal(t, tt.say, trust.String())
			if tt.fallback {
				assert.Nil(t, trust.Read)
				err := trust.untrusted()
				assert.ErrorIs(t, err, errUntrusted)
				assert.Equal(t, `schedclock: counter not trusted "cntvct": `+tt.say[len("cntvct: "):], err.Error())
			} else {
				require.NotNil(t, trust.Read)
				assert.Equal(t, fakeReaders[tt.match.Erratum](), trust.Read(), "the erratum's own read")
				assert.NoError(t, trust.untrusted())
			}
		})
	}
}

func TestCheckCNTVCTSaysWhatItCouldNotRead(t *testing.T) {
	match := errata.Match{Unknown: []string{"ACPI GTDT: open sys/firmware/acpi/tables/GTDT: permission denied"}}
	trust := checkCNTVCTOn(match, fakeReader, fixedCost(10, 30))
	assert.Equal(t, "cntvct: no erratum; read 10 ns, portable 30 ns; could not check ACPI GTDT: "+
		"open sys/firmware/acpi/tables/GTDT: permission denied", trust.String())
	assert.False(t, trust.Fallback, "what could not be read does not decide")
}

// TestCheckCNTVCTHere runs the real check: off arm64 it says why there is
// no counter; on arm64 (qemu here) it finds no erratum on the host's
// files and keeps or drops the counter by its measured cost.
func TestCheckCNTVCTHere(t *testing.T) {
	trust := checkCNTVCT()
	t.Logf("%s", trust)
	if !cntvctSupported {
		assert.Equal(t, "cntvct: "+noAsmReason("arm64"), trust.String())
		assert.ErrorIs(t, trust.untrusted(), ErrUnsupported)
		assert.Nil(t, trust.Read)
		return
	}
	assert.Empty(t, trust.Reason)
	assert.Greater(t, trust.Cost.CounterNs, 0.0)
	assert.Greater(t, trust.Cost.PortableNs, 0.0)
	assert.Equal(t, trust.Cost.counterSlower(), trust.Fallback)
	assert.Equal(t, trust.Fallback, trust.Read == nil)
}

// TestCNTVCTErratumReaders runs each workaround read on the real counter
// (qemu's, on this host): each must count forwards on one thread.
func TestCNTVCTErratumReaders(t *testing.T) {
	if !cntvctSupported {
		assert.Nil(t, cntvctErratum(errata.ARM858921))
		t.Skip("no CNTVCT in this build: ", noAsmReason("arm64"))
	}
	assert.Equal(t, funcPtr(cntvctReader()), funcPtr(cntvctErratum(errata.None)))
	for e := errata.None; e <= errata.Sun50iUnknown1; e++ {
		read := cntvctErratum(e)
		require.NotNil(t, read, "%v", e)
		if e != errata.None {
			assert.NotEqual(t, funcPtr(cntvctReader()), funcPtr(read), "%v has a read of its own", e)
		}
		assertCountsForwards(t, e.String(), read)
	}
}

// checkCNTVCT decides how the default clock should read CNTVCT_EL0 here:
// it looks for the errata the kernel works around (device tree, ACPI
// GTDT, MIDR: internal/errata), takes the workaround read for the one it
// finds, and measures that read against the portable source. It costs a
// few small file reads and, on a healthy counter, some 20 µs of reads;
// at most about 5 ms where reads are trapped.
func checkCNTVCT() cntvctTrust {
	if !cntvctSupported {
		return cntvctTrust{Reason: noAsmReason("arm64")}
	}
	return checkCNTVCTOn(errata.Detect(os.DirFS("/")), cntvctErratum, func(read func() uint64) readCost { return measureReadCost(read, mono) })
}

// checkCNTVCTOn is checkCNTVCT on a given erratum match, reader binding
// and cost measurement.
func checkCNTVCTOn(match errata.Match, reader func(errata.Erratum) func() uint64, measure func(func() uint64) readCost) cntvctTrust {
	read := reader(match.Erratum)
	return decideCNTVCT(match, read, measure(read))
}
