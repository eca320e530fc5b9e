package schedclock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/cpu"
	"github.com/schedclock/schedclock/internal/kernel"
	"github.com/schedclock/schedclock/internal/testenv"
)

// The table's walk, and Hardware on each architecture: a refusal says
// why, a counter counts, its rate agrees with the raw clock, and a Clock
// on it never goes back (source_tsc_test.go, source_cntvct_test.go and
// source_timer_test.go test how each descriptor decides).

// TestChooseCounterWalksTheTableInOrder: the walk skips the counters of
// other architectures, takes the first whose probe succeeds, and where
// none does, returns every refusal in one error that wraps each.
func TestChooseCounterWalksTheTableInOrder(t *testing.T) {
	probed := []string{}
	entry := func(name, arch string, err error) *descriptor {
		return &descriptor{Arch: arch, Probe: func() (Source, rateOrigin, float64, error) {
			probed = append(probed, name)
			if err != nil {
				return Source{}, 0, 0, err
			}
			return Source{Name: name}, rateCPUID, 0.5, nil
		}}
	}
	untrusted := fmt.Errorf("%w: first", errUntrusted)
	unsupported := fmt.Errorf("%w: second", ErrUnsupported)
	other := entry("elsewhere", "not-"+runtime.GOARCH, nil)
	first, second, third := entry("first", runtime.GOARCH, untrusted), entry("second", runtime.GOARCH, nil), entry("third", runtime.GOARCH, nil)

	ch := chooseCounter([]*descriptor{other, first, second, third})
	assert.Same(t, second, ch.desc)
	assert.Equal(t, "second", ch.src.Name)
	assert.Equal(t, rateCPUID, ch.origin)
	assert.NoError(t, ch.err)
	assert.Equal(t, []string{"first", "second"}, probed, "a counter of another arch was probed, or the walk went on")

	probed = nil
	ch = chooseCounter([]*descriptor{first, other, entry("second", runtime.GOARCH, unsupported)})
	assert.Nil(t, ch.desc)
	assert.ErrorIs(t, ch.err, errUntrusted)
	assert.ErrorIs(t, ch.err, ErrUnsupported)
	assert.EqualError(t, ch.err, untrusted.Error()+"; "+unsupported.Error())

	ch = chooseCounter([]*descriptor{other})
	assert.ErrorIs(t, ch.err, ErrUnsupported)
	assert.Contains(t, ch.err.Error(), runtime.GOARCH)
}

// assertReasoned checks that err wraps ErrUnsupported or errUntrusted and
// says more than the sentinel does.
func assertReasoned(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	var sentinel error
	switch {
	case errors.Is(err, ErrUnsupported):
		sentinel = ErrUnsupported
	case errors.Is(err, errUntrusted):
		sentinel = errUntrusted
	default:
		t.Fatalf("error %q wraps neither ErrUnsupported nor errUntrusted", err)
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
	assert.Greater(t, prev, first, "%s did not advance in 200,000 reads", src.Name)
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
	names := []string{"tsc", "cntvct", "rdtime", "timebase", "tod", "stablecounter"}
	for _, k := range paravirtKinds {
		names = append(names, k.name)
	}
	assert.Contains(t, names, src.Name)
	assert.GreaterOrEqual(t, src.Bits, 56)
	assertCounts(t, src)
	if origin == rateMeasured {
		assert.Zero(t, src.Rate, "probeHardware must not measure")
		return
	}
	require.NotZero(t, src.Rate)
	assert.NoError(t, src.validate())
	if cpu.Emulated() && !statedRateHolds(src, measureRate) {
		// qemu-loongarch64 7.2: CPUCFG states 100 MHz, RDTIME.D reads the
		// host's TSC; the constructor and the default clock's check
		// measure instead (TestStableCounter, TestPrepareReadCost).
		t.Logf("not asserted under emulation: %s does not run at the stated %d Hz", src.Name, src.Rate)
		return
	}
	assertRateAgrees(t, src, errPPM)
}

func TestProbeHardwareOnThisArch(t *testing.T) {
	_, _, _, err := probeHardware()
	switch runtime.GOARCH {
	case "amd64":
		// The TSC first, then the paravirtual clock: the first that
		// probes wins, and where neither does both refusals are said.
		_, _, _, tscErr := probeTSC()
		_, _, _, pvErr := probePvclock()
		switch {
		case tscErr == nil || pvErr == nil:
			assert.NoError(t, err)
		default:
			assert.ErrorIs(t, err, errors.Unwrap(tscErr))
			assert.Contains(t, err.Error(), tscErr.Error())
			assert.Contains(t, err.Error(), pvErr.Error())
		}
	case "arm64":
		_, _, _, cntvctErr := probeCNTVCT()
		assert.Equal(t, cntvctErr, err)
	case "riscv64", "ppc64le", "s390x", "loong64":
		for _, e := range timerEntries {
			if e.entry.Arch == runtime.GOARCH {
				_, _, _, ownErr := e.entry.Probe()
				assert.Equal(t, ownErr, err)
			}
		}
	default:
		require.ErrorIs(t, err, ErrUnsupported)
		assert.Contains(t, err.Error(), runtime.GOARCH)
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
	if hw.Rate != 0 && !statedRateHolds(hw, measureRate) {
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
			s += c.nanos()
		}
		hwSink += uint64(s)
	})
	b.Run("Now="+hw.Name+"/parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			var s int64
			for pb.Next() {
				s += c.nanos()
			}
			hwSinkAdd(uint64(s))
		})
	})
}

func hwSinkAdd(v uint64) { hwSink += v }

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
						c.nanos()
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

// probeHardware returns this machine's preferred hardware counter without
// blocking (see chooseCounter).
func probeHardware() (src Source, origin rateOrigin, errPPM float64, err error) {
	ch := chooseCounter(counterTable())
	return ch.src, ch.origin, ch.errPPM, ch.err
}

func TestTSC(t *testing.T) {
	src, err := TSC()
	if !tscSupported {
		require.ErrorIs(t, err, ErrUnsupported)
		assert.Contains(t, err.Error(), noAsmReason("amd64"))
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
	if origin == rateMeasured {
		errPPM = 0 // TSC's own measurement: compare against a second one
	}
	assertRateAgrees(t, src, errPPM)
}

func TestCNTVCT(t *testing.T) {
	src, err := CNTVCT()
	if !cntvctSupported {
		require.ErrorIs(t, err, ErrUnsupported)
		assert.Contains(t, err.Error(), noAsmReason("arm64"))
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
	assert.Equal(t, rateCNTFRQ, origin)
	assertCounts(t, src)
	assertRateAgrees(t, src, errPPM)
}

// timerReaderHere returns the read of this build's riscv64, ppc64le,
// s390x or loong64 counter (the ordering tests run it as they run
// readTSC and readCNTVCT), nil where the build has none, and nil under
// qemu-riscv64 and qemu-loongarch64: qemu 7.2 implements RDTIME and
// RDTIME.D as a bare RDTSC of the host (each counts at the host's TSC
// rate, not at the rate the guest's firmware states), which the host CPU
// reorders with the emulated loads whatever guest barrier surrounds it.
// The ordering tests then measure qemu's counter, not this reader, and
// fail or pass with the host's timing (docs/guarantees.md has the
// counts). qemu-ppc64le's time base counts at the host's rate too, but
// its ISYNC orders it there: the mutation that removes it is killed.
func timerReaderHere() func() uint64 {
	if (rdtimeSupported || stableCounterSupported) && cpu.Emulated() {
		return nil
	}
	for _, read := range []func() uint64{rdtimeReader(), timebaseReader(), todReader(), stableCounterReader()} {
		if read != nil {
			return read
		}
	}
	return nil
}

// timerReaderName names the assembly function timerReaderHere returns.
func timerReaderName() string {
	switch {
	case rdtimeSupported:
		return "readRDTIME"
	case timebaseSupported:
		return "readTimeBase"
	case todSupported:
		return "readTOD"
	}
	return "readStableCounter"
}

// timerCounter is one of the timer counters Hardware serves, as its
// tests (TestRDTIME, TestTimeBase, TestTOD, TestStableCounter) see it.
type timerCounter struct {
	name      string // the Source's Name
	arch      string // the GOARCH whose assembly reads it
	supported bool
	construct func() (Source, error)
	probe     func() (Source, rateOrigin, float64, error)
	// origins are the rate origins the probe may return here.
	origins []rateOrigin
}

// testTimerCounter checks a counter's constructor where its assembly is
// not in the build (ErrUnsupported, saying why) and, where it is, the
// Source, a Clock on it read by several goroutines, and its rate against
// CLOCK_MONOTONIC_RAW over 2 s.
func testTimerCounter(t *testing.T, tc timerCounter) {
	src, err := tc.construct()
	if !tc.supported {
		require.ErrorIs(t, err, ErrUnsupported)
		assert.Contains(t, err.Error(), noAsmReason(tc.arch))
		if runtime.GOARCH == tc.arch && runtime.Compiler == "gc" {
			assert.Contains(t, err.Error(), "purego")
		} else {
			assert.Contains(t, err.Error(), "not "+tc.arch)
		}
		assert.Zero(t, src)
		_, _, _, err = tc.probe()
		assert.ErrorIs(t, err, ErrUnsupported)
		return
	}
	require.NoError(t, err)
	assert.Equal(t, tc.name, src.Name)
	assert.Equal(t, 64, src.Bits)
	require.NoError(t, src.validate())
	probed, origin, errPPM, err := tc.probe()
	require.NoError(t, err)
	t.Logf("%s: %d Hz (%v, ±%g ppm)", src.Name, src.Rate, origin, errPPM)
	assert.Contains(t, tc.origins, origin)
	switch {
	case origin == rateMeasured:
		assert.Zero(t, probed.Rate, "the probe must not measure")
	case src.Rate != probed.Rate:
		// The counter does not run at the stated rate (qemu-loongarch64).
		t.Logf("%s: the stated %d Hz replaced by the measured %d Hz", src.Name, probed.Rate, src.Rate)
		assert.False(t, statedRateHolds(probed, measureRate), "a stated rate that holds is kept")
	}
	assertCounts(t, src)

	c, err := New(src)
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, src.Name, c.Info().Source)
	assertNeverBackAcrossGoroutines(t, c)
	t.Run("rate", func(t *testing.T) {
		testenv.Qualify(t) // 2 s of real time
		assertClockRateWithin(t, c, src.Name, 100)
	})
}

// assertNeverBackAcrossGoroutines reads c from four goroutines while the
// test updates it 200 times, each once the readers have read 64 times
// since the last, and fails if one of them sees it go back.
func assertNeverBackAcrossGoroutines(t *testing.T, c *Clock) {
	t.Helper()
	var reads atomic.Int64
	var wg sync.WaitGroup
	var stopped sync.WaitGroup
	stopped.Add(1)
	backs := make(chan [2]int64, 4)
	for range 4 {
		wg.Go(func() {
			done := make(chan struct{})
			go func() { stopped.Wait(); close(done) }()
			for last := c.nanos(); ; {
				select {
				case <-done:
					return
				default:
				}
				reads.Add(1)
				if now := c.nanos(); now < last {
					backs <- [2]int64{last, now}
					return
				} else {
					last = now
				}
				runtime.Gosched()
			}
		})
	}
	for range 200 {
		require.NoError(t, c.Update())
		for from := reads.Load(); reads.Load()-from < 64 && len(backs) == 0; {
			runtime.Gosched()
		}
	}
	stopped.Done()
	wg.Wait()
	close(backs)
	for b := range backs {
		t.Errorf("%s went back: %d after %d", c.Info().Source, b[1], b[0])
	}
}

// TestWithMeasuredRate: what withMeasuredRate returns without measuring
// (TestWithMeasuredRateMeasures, in the qualification layer, measures).
func TestWithMeasuredRate(t *testing.T) {
	refusal := errors.New("refused")
	_, err := withMeasuredRate(Source{Name: "x", Read: readMono, Bits: 64, Rate: 5}, rateDeviceTree, 0, refusal)
	assert.Equal(t, refusal, err, "a probe's error is returned as it is")

	// The TOD clock's architected rate is neither measured nor checked.
	src, err := withMeasuredRate(Source{Name: "tod", Read: func() uint64 { return 7 }, Bits: 64, Rate: 5}, rateArchitected, 0, nil)
	require.NoError(t, err)
	assert.Equal(t, uint64(5), src.Rate)
}

// timerEntries are the four counters' entries, with the clocksource the
// kernel registers each under.
var timerEntries = []struct {
	entry *descriptor
	name  string
	want  string
}{
	{&rdtimeCounter, "rdtime", "riscv_clocksource"},
	{&timebaseCounter, "timebase", "timebase"},
	{&todCounter, "tod", "tod"},
	{&stableCounterCounter, "stablecounter", "Constant"},
}

func TestTimerCountersInTheTable(t *testing.T) {
	for _, e := range timerEntries {
		if e.entry.Arch == runtime.GOARCH {
			assert.Contains(t, counterTable(), e.entry, e.name)
		} else {
			assert.NotContains(t, counterTable(), e.entry, "%s: another architecture's counter in the table", e.name)
		}
		assert.Equal(t, e.want, e.entry.Verdict().Want, "%s follows the kernel's word on its own clocksource", e.name)
		assert.NotNil(t, e.entry.Prepare, "%s checks what a read costs", e.name)
		src, _, _, err := e.entry.Probe()
		if e.entry.Arch != runtime.GOARCH {
			assert.ErrorIs(t, err, ErrUnsupported)
			continue
		}
		if err == nil {
			assert.Equal(t, e.name, src.Name)
		}
	}
}

// TestTimerCountersAreAdoptedOnTheKernelsWord gives each entry's verdict
// a synthetic current_clocksource (under qemu-user the real one is the
// host's): the default clock adopts the counter where the kernel runs on
// it, and stays on the portable source, saying why, where it does not.
func TestTimerCountersAreAdoptedOnTheKernelsWord(t *testing.T) {
	base := time.Now()
	dir := t.TempDir()
	for _, e := range timerEntries {
		hw := Source{Name: e.name, Bits: 64, Rate: 1e9, Read: func() uint64 { return uint64(time.Since(base)) }}
		probe := func() (Source, rateOrigin, float64, error) {
			return hw, rateArchitected, 0, nil
		}
		for _, current := range []string{e.want, "kvm-clock"} {
			t.Run(e.name+" on "+current, func(t *testing.T) {
				path := filepath.Join(dir, e.name+"-"+current)
				require.NoError(t, os.WriteFile(path, []byte(current+"\n"), 0o644))
				c := newChosenDefaultClock([]*descriptor{{Arch: runtime.GOARCH, Probe: probe,
					Verdict: func() kernel.Verdict { return kernel.ReadVerdict(path, e.entry.Verdict().Want) }}})
				defer func() { require.NoError(t, c.Close()) }()
				in := *c.st.info.Load()
				assert.Contains(t, in.Evidence.Kernel, "kernel clocksource is "+current)
				if current == e.want {
					assert.Equal(t, e.name, in.Source)
					assert.Empty(t, in.Evidence.Rejected)
					return
				}
				assert.Equal(t, "portable", in.Source)
				assert.Contains(t, in.Evidence.Rejected, e.name+": ")
				assert.Contains(t, in.Evidence.Rejected, "kvm-clock, not "+e.want)
			})
		}
	}
}

func TestRDTIME(t *testing.T) {
	testTimerCounter(t, timerCounter{
		name: "rdtime", arch: "riscv64", supported: rdtimeSupported,
		construct: RDTIME, probe: probeRDTIME,
		origins: []rateOrigin{rateDeviceTree, rateMeasured},
	})
}

func TestTimeBase(t *testing.T) {
	testTimerCounter(t, timerCounter{
		name: "timebase", arch: "ppc64le", supported: timebaseSupported,
		construct: TimeBase, probe: probeTimeBase,
		origins: []rateOrigin{rateCPUInfo, rateMeasured},
	})
}

func TestTOD(t *testing.T) {
	testTimerCounter(t, timerCounter{
		name: "tod", arch: "s390x", supported: todSupported,
		construct: TOD, probe: probeTOD,
		origins: []rateOrigin{rateArchitected},
	})
}

func TestStableCounter(t *testing.T) {
	testTimerCounter(t, timerCounter{
		name: "stablecounter", arch: "loong64", supported: stableCounterSupported,
		construct: StableCounter, probe: probeStableCounter,
		origins: []rateOrigin{rateCPUCFG},
	})
}
