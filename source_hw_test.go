package schedclock

import (
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/cpu"
	"github.com/schedclock/schedclock/internal/errata"
)

// assertReasoned checks that err wraps ErrUnsupported or ErrUntrusted and
// says more than the sentinel does.
func assertReasoned(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	var sentinel error
	switch {
	case errors.Is(err, ErrUnsupported):
		sentinel = ErrUnsupported
	case errors.Is(err, ErrUntrusted):
		sentinel = ErrUntrusted
	default:
		t.Fatalf("error %q wraps neither ErrUnsupported nor ErrUntrusted", err)
	}
	// The reason follows the sentinel and the counter's name:
	// `schedclock: counter not trusted "tsc": reason`.
	reason := strings.TrimPrefix(err.Error(), sentinel.Error())
	if i := strings.Index(reason, ": "); i >= 0 {
		reason = reason[i+len(": "):]
	} else {
		reason = ""
	}
	assert.NotEmpty(t, strings.TrimSpace(reason), "error %q gives no reason", err)
}

// assertCounts reads src many times on one thread and checks that it
// never goes backwards and does advance.
func assertCounts(t *testing.T, src Source) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	mask := ^uint64(0) >> (64 - src.Bits)
	first := src.Read() & mask
	prev := first
	for i := 0; i < 200_000; i++ {
		now := src.Read() & mask
		if now < prev {
			t.Fatalf("%s went backwards on one thread: %d after %d (read %d)", src.Name, now, prev, i)
		}
		prev = now
	}
	time.Sleep(time.Millisecond)
	assert.Greater(t, src.Read()&mask, first, "%s did not advance in 1 ms", src.Name)
}

// assertRateAgrees measures src against the reference clock and checks
// that its declared Rate agrees within 500 ppm plus the stated errors.
func assertRateAgrees(t *testing.T, src Source, errPPM float64) {
	t.Helper()
	hz, measureErrPPM, err := measureRate(src.Read, 50*time.Millisecond)
	require.NoError(t, err)
	offPPM := (hz - float64(src.Rate)) / float64(src.Rate) * 1e6
	t.Logf("%s: rate %d Hz, measured %.0f Hz (%+.2f ppm, measurement ±%.2f ppm, source ±%.2f ppm)",
		src.Name, src.Rate, hz, offPPM, measureErrPPM, errPPM)
	assert.InDelta(t, 0, offPPM, 500+measureErrPPM+errPPM, "%s rate disagrees with %s", src.Name, rawClockName)
}

func TestProbeHardware(t *testing.T) {
	src, origin, errPPM, err := probeHardware()
	if err != nil {
		t.Logf("no hardware counter: %v", err)
		assertReasoned(t, err)
		return
	}
	t.Logf("hardware counter %q, %d bits, %d Hz (%v, ±%.2f ppm)", src.Name, src.Bits, src.Rate, origin, errPPM)
	require.NotNil(t, src.Read)
	assert.Contains(t, []string{"tsc", "cntvct", "rdtime", "timebase", "tod", "stablecounter"}, src.Name)
	assert.GreaterOrEqual(t, src.Bits, 56)
	assertCounts(t, src)
	if origin == RateMeasured {
		assert.Zero(t, src.Rate, "probeHardware must not measure")
		return
	}
	require.NotZero(t, src.Rate)
	assert.NoError(t, src.validate())
	if cpu.Emulated() && !statedRateHolds(src) {
		// qemu-loongarch64 7.2: CPUCFG states 100 MHz, RDTIME.D reads the
		// host's TSC; the constructor and the default clock's check
		// measure instead (TestStableCounter, TestPrepareReadCost).
		t.Logf("not asserted under emulation: %s does not run at the stated %d Hz", src.Name, src.Rate)
		return
	}
	assertRateAgrees(t, src, errPPM)
}

func TestTSC(t *testing.T) {
	src, err := TSC()
	if !tscSupported {
		require.ErrorIs(t, err, ErrUnsupported)
		assert.Contains(t, err.Error(), tscUnsupportedReason())
		if runtime.GOARCH == "amd64" && runtime.Compiler == "gc" {
			assert.Contains(t, err.Error(), "purego")
		} else {
			assert.Contains(t, err.Error(), "not amd64")
		}
		_, _, _, err = probeTSC()
		assert.ErrorIs(t, err, ErrUnsupported)
		return
	}
	if err != nil {
		// A real machine may lack an invariant TSC or the kernel may
		// distrust it; the error must say which.
		t.Logf("TSC rejected: %v", err)
		assertReasoned(t, err)
		_, _, _, probeErr := probeTSC()
		assert.EqualError(t, probeErr, err.Error())
		return
	}
	assert.Equal(t, "tsc", src.Name)
	assert.Equal(t, 64, src.Bits)
	require.NoError(t, src.validate())
	assertCounts(t, src)
	_, origin, errPPM, err := probeTSC()
	require.NoError(t, err)
	if origin == RateMeasured {
		errPPM = 0 // TSC's own measurement: compare against a second one
	}
	assertRateAgrees(t, src, errPPM)
}

// tscLeaves replays the CPUID leaves of an EPYC KVM guest with an
// invariant TSC and the hypervisor timing leaf (2994374 kHz), with some
// leaves replaced; internal/cpu tests the CPUs one by one.
func tscLeaves(changes map[[2]uint32][4]uint32) cpu.Func {
	leaves := map[[2]uint32][4]uint32{
		{0x0, 0}:        {0x10, 0x68747541, 0x444d4163, 0x69746e65},
		{0x1, 0}:        {0x00a00f11, 0x00020800, 0xfef83203, 0x178bfbff},
		{0x40000000, 0}: {0x40000010, 0x4b4d564b, 0x564b4d56, 0x0000004d},
		{0x40000010, 0}: {2_994_374, 1_000_000, 0, 0},
		{0x80000000, 0}: {0x80000021, 0, 0, 0},
		{0x80000007, 0}: {0, 0, 0, 0x100},
	}
	for k, v := range changes {
		leaves[k] = v
	}
	return func(eax, ecx uint32) (a, b, c, d uint32) {
		r := leaves[[2]uint32{eax, ecx}]
		return r[0], r[1], r[2], r[3]
	}
}

// TestTSCRateWithTheKernel checks what tscRate adds to CPUID's answer:
// the kernel's clocksource, and the sentinel each refusal wraps.
func TestTSCRateWithTheKernel(t *testing.T) {
	tests := []struct {
		name        string
		changes     map[[2]uint32][4]uint32
		clocksource string
		wantOrigin  RateOrigin
		wantErr     error
		wantMsg     string
	}{
		{name: "kernel uses the TSC", clocksource: "tsc", wantOrigin: RateHypervisor},
		{name: "clocksource with its newline", clocksource: "tsc\n", wantOrigin: RateHypervisor},
		{name: "no sysfs: CPUID only", clocksource: "", wantOrigin: RateHypervisor},
		{name: "no rate leaf: measured", clocksource: "tsc", wantOrigin: RateMeasured,
			changes: map[[2]uint32][4]uint32{{0x40000010, 0}: {}}},
		{name: "kernel uses kvm-clock", clocksource: "kvm-clock\n",
			wantErr: ErrUntrusted, wantMsg: `schedclock: counter not trusted "tsc": kernel clocksource is kvm-clock, not tsc`},
		{name: "kernel demoted the TSC to hpet", clocksource: "hpet",
			wantErr: ErrUntrusted, wantMsg: `schedclock: counter not trusted "tsc": kernel clocksource is hpet, not tsc`},
		{name: "not invariant, whatever the kernel says", clocksource: "hpet",
			changes: map[[2]uint32][4]uint32{{0x80000007, 0}: {}},
			wantErr: ErrUntrusted, wantMsg: `schedclock: counter not trusted "tsc": no invariant TSC (CPUID 0x80000007 EDX bit 8 clear)`},
		{name: "no TSC at all", clocksource: "tsc",
			changes: map[[2]uint32][4]uint32{{0x1, 0}: {0x00a00f11, 0x00020800, 0xfef83203, 0x178bfbef}},
			wantErr: ErrUnsupported, wantMsg: `schedclock: counter not supported here "tsc": no TSC (CPUID 1 EDX bit 4 clear)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rate, origin, errPPM, err := tscRate(tscLeaves(tt.changes), tt.clocksource)
			if tt.wantErr != nil {
				require.Error(t, err)
				assert.ErrorIs(t, err, tt.wantErr)
				assert.EqualError(t, err, tt.wantMsg)
				assert.Zero(t, rate)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantOrigin, origin)
			if origin == RateMeasured {
				assert.Zero(t, rate)
				return
			}
			assert.Equal(t, uint64(2_994_374_000), rate)
			assert.InDelta(t, 0.5e6/2_994_374, errPPM, 1e-9)
		})
	}
}

func TestCNTVCT(t *testing.T) {
	src, err := CNTVCT()
	if !cntvctSupported {
		require.ErrorIs(t, err, ErrUnsupported)
		assert.Contains(t, err.Error(), cntvctUnsupportedReason())
		if runtime.GOARCH == "arm64" && runtime.Compiler == "gc" {
			assert.Contains(t, err.Error(), "purego")
		} else {
			assert.Contains(t, err.Error(), "not arm64")
		}
		return
	}
	// Every arm64 Linux system, qemu-user included, programs CNTFRQ_EL0.
	require.NoError(t, err)
	assert.Equal(t, "cntvct", src.Name)
	assert.Equal(t, 56, src.Bits)
	require.NoError(t, src.validate())
	_, origin, errPPM, err := probeCNTVCT()
	require.NoError(t, err)
	assert.Equal(t, RateCNTFRQ, origin)
	assertCounts(t, src)
	assertRateAgrees(t, src, errPPM)
}

func TestProbeHardwareOnThisArch(t *testing.T) {
	_, _, _, err := probeHardware()
	switch runtime.GOARCH {
	case "amd64":
		_, _, _, tscErr := probeTSC()
		assert.Equal(t, tscErr, err)
	case "arm64":
		_, _, _, cntvctErr := probeCNTVCT()
		assert.Equal(t, cntvctErr, err)
	case "riscv64", "ppc64le", "s390x", "loong64":
		for _, e := range timerEntries {
			if e.entry.arch == runtime.GOARCH {
				_, _, _, ownErr := e.entry.probe()
				assert.Equal(t, ownErr, err)
			}
		}
	default:
		require.ErrorIs(t, err, ErrUnsupported)
		assert.Contains(t, err.Error(), runtime.GOARCH)
	}
}

// slowRead costs about 2 µs, like a read the kernel traps and emulates
// with a retrying workaround.
func slowRead() uint64 {
	start := readMono()
	for readMono()-start < 2000 {
	}
	return readMono()
}

func TestMeasureReadCost(t *testing.T) {
	cost := measureReadCost(slowRead)
	t.Logf("slow read %.1f ns, portable %.1f ns", cost.CounterNs, cost.PortableNs)
	assert.GreaterOrEqual(t, cost.CounterNs, 2000.0)
	assert.Less(t, cost.PortableNs, cost.CounterNs)
	assert.True(t, cost.counterSlower())

	cost = measureReadCost(func() uint64 { return 42 })
	t.Logf("constant %.1f ns, portable %.1f ns", cost.CounterNs, cost.PortableNs)
	assert.False(t, cost.counterSlower(), "a function that does nothing is not slower than a clock read")
	assert.Greater(t, cost.PortableNs, 0.0)

	// The hardware counters of this build, for the record.
	for name, read := range map[string]func() uint64{"tsc": tscReader(), "cntvct": cntvctReader()} {
		if read != nil {
			cost := measureReadCost(read)
			t.Logf("%s on %s: read %.1f ns, portable %.1f ns", name, runtime.GOARCH, cost.CounterNs, cost.PortableNs)
		}
	}
}

func TestMeasureReadCostIsBounded(t *testing.T) {
	calls := 0
	cost := measureReadCost(func() uint64 {
		calls++
		start := readMono()
		for readMono()-start < 200_000 { // 200 µs: a pathological read
		}
		return 0
	})
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
				assert.ErrorIs(t, err, ErrUntrusted)
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
		assert.Equal(t, "cntvct: "+cntvctUnsupportedReason(), trust.String())
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
		assert.Nil(t, cntvctErratumReader(errata.ARM858921))
		t.Skip("no CNTVCT in this build: ", cntvctUnsupportedReason())
	}
	assert.Equal(t, funcPtr(cntvctReader()), funcPtr(cntvctErratumReader(errata.None)))
	for e := errata.None; e <= errata.Sun50iUnknown1; e++ {
		read := cntvctErratumReader(e)
		require.NotNil(t, read, "%v", e)
		if e != errata.None {
			assert.NotEqual(t, funcPtr(cntvctReader()), funcPtr(read), "%v has a read of its own", e)
		}
		assertCounts(t, Source{Name: e.String(), Read: read, Bits: cntvctBits, Rate: 1})
	}
}

var hwSink uint64

// hwSource is the machine's hardware counter with a rate, whether or not
// the default clock trusts it here (the benchmarks measure the read path,
// not the counter's trustworthiness).
func hwSource(tb testing.TB) (Source, bool) {
	hw, _, _, err := probeHardware()
	switch {
	case err == nil:
	case tscSupported:
		hw = Source{Name: "tsc", Read: tscReader(), Bits: 64}
	default:
		return Source{}, false
	}
	if hw.Rate != 0 && !statedRateHolds(hw) {
		// The counter does not run at the rate its firmware states
		// (qemu-loongarch64's CPUCFG): measured, as the constructor does.
		hw.Rate = 0
	}
	if hw.Rate == 0 {
		hz, _, err := measureRate(hw.Read, 20*time.Millisecond)
		if err != nil {
			tb.Fatal(err)
		}
		hw.Rate = uint64(hz)
	}
	return hw, true
}

// BenchmarkHardware is Clock.Now on the hardware counter against the bare
// counter read, the same assembly the source uses (LFENCE; RDTSC, or ISB;
// MRS CNTVCT_EL0 and its ordering load): the difference is everything the
// latch costs.
func BenchmarkHardware(b *testing.B) {
	hw, ok := hwSource(b)
	if !ok {
		b.Skip("no hardware counter in this build")
	}
	c, err := New(hw)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.Run("bare="+hw.Name, func(b *testing.B) {
		var s uint64
		for b.Loop() {
			s += hw.Read()
		}
		hwSink += s
	})
	b.Run("Now="+hw.Name, func(b *testing.B) {
		var s int64
		for b.Loop() {
			s += c.Now()
		}
		hwSink += uint64(s)
	})
	b.Run("Now="+hw.Name+"/parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			var s int64
			for pb.Next() {
				s += c.Now()
			}
			hwSinkAdd(uint64(s))
		})
	})
}

func hwSinkAdd(v uint64) { hwSink += v }

// BenchmarkRefine is one refinement of the rate against the raw clock:
// the 32 bracketed samples and the switch to the new rate.
func BenchmarkRefine(b *testing.B) {
	c, err := New(Portable(), WithReference(rawNow))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	c.mu.Lock()
	defer c.unlock()
	tr := c.track
	tr.startLocked(time.Now())
	tr.step = len(calibrationSchedule) // the sliding phase: always adopts
	tr.history = []ratePoint{tr.baseline}
	for b.Loop() {
		c.refineLocked(tr, time.Now())
	}
}

// BenchmarkTailLatency records the distribution of single calls, each
// bracketed by two reads of the raw counter, and reports its percentiles
// against the bare counter read's own distribution measured the same
// way: the latch must add no tail of its own. calls-overlapping-update
// counts the calls during which the writer published (the only calls
// that can retry), with a writer folding the clock at 1 kHz.
func BenchmarkTailLatency(b *testing.B) {
	type subject struct {
		name string
		raw  func() uint64 // the raw counter, in ticks
		rate float64
		src  Source
	}
	subjects := []subject{{"portable", readMono, 1e9, Portable()}}
	if hw, ok := hwSource(b); ok {
		subjects = append(subjects, subject{hw.Name, hw.Read, float64(hw.Rate), hw})
	}
	for _, s := range subjects {
		c, err := New(s.src)
		if err != nil {
			b.Fatal(err)
		}
		stop := make(chan struct{})
		go func() {
			ticker := time.NewTicker(time.Millisecond)
			defer ticker.Stop()
			for {
				select {
				case <-stop:
					return
				case <-ticker.C:
					c.Update()
				}
			}
		}()
		for _, which := range []string{"bare", "Now"} {
			b.Run(s.name+"/"+which, func(b *testing.B) {
				lat := make([]uint64, 0, b.N)
				overlapped := 0
				for b.Loop() {
					seq := c.latch.seq.Load()
					before := s.raw()
					if which == "Now" {
						c.Now()
					} else {
						s.raw()
					}
					after := s.raw()
					lat = append(lat, after-before)
					if c.latch.seq.Load() != seq {
						overlapped++
					}
				}
				slices.Sort(lat)
				ns := func(q float64) float64 {
					return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))]) * 1e9 / s.rate
				}
				b.ReportMetric(ns(0.5), "p50-ns")
				b.ReportMetric(ns(0.99), "p99-ns")
				b.ReportMetric(ns(0.999), "p99.9-ns")
				b.ReportMetric(ns(1), "max-ns")
				if which == "Now" {
					b.ReportMetric(float64(overlapped), "calls-overlapping-update")
				}
			})
		}
		close(stop)
		_ = c.Close()
	}
}
