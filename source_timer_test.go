package schedclock

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/cpu"
	"github.com/schedclock/schedclock/internal/hwcounter"
	"github.com/schedclock/schedclock/internal/kernel"
)

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
	if (hwcounter.RDTIMESupported || hwcounter.StableCounterSupported) && cpu.Emulated() {
		return nil
	}
	for _, read := range []func() uint64{hwcounter.RDTIME(), hwcounter.TimeBase(), hwcounter.TOD(), hwcounter.StableCounter()} {
		if read != nil {
			return read
		}
	}
	return nil
}

// timerReaderName names the assembly function timerReaderHere returns.
func timerReaderName() string {
	switch {
	case hwcounter.RDTIMESupported:
		return "readRDTIME"
	case hwcounter.TimeBaseSupported:
		return "readTimeBase"
	case hwcounter.TODSupported:
		return "readTOD"
	}
	return "readStableCounter"
}

// timerCounter is one of the counters source_timer.go serves, as its
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
		assert.False(t, statedRateHolds(probed), "a stated rate that holds is kept")
	}
	assertCounts(t, src)

	c, err := New(src)
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, src.Name, c.Info().Source)
	assertNeverBackAcrossGoroutines(t, c)
	assertClockRateWithin(t, c, src.Name, 100)
}

// assertNeverBackAcrossGoroutines reads c from four goroutines while the
// test updates it 200 times, and fails if one of them sees it go back.
func assertNeverBackAcrossGoroutines(t *testing.T, c *Clock) {
	t.Helper()
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
		time.Sleep(time.Millisecond)
	}
	stopped.Done()
	wg.Wait()
	close(backs)
	for b := range backs {
		t.Errorf("%s went back: %d after %d", c.Info().Source, b[1], b[0])
	}
}

// assertClockRateWithin checks that c advances with CLOCK_MONOTONIC_RAW
// to within ppm over 2 s. Each end is bracketed by two reads of the
// reference; the bracket's width is added to the tolerance, so a slow
// or preempted read cannot fail the test (only the counter's rate can).
func assertClockRateWithin(t *testing.T, c *Clock, name string, ppm float64) {
	t.Helper()
	bracket := func() (clock, ref, width int64) {
		lo := rawNow()
		clock = c.nanos()
		hi := rawNow()
		return clock, lo + (hi-lo)/2, hi - lo
	}
	c0, r0, w0 := bracket()
	time.Sleep(2 * time.Second)
	c1, r1, w1 := bracket()
	elapsed := float64(r1 - r0)
	offPPM := (float64(c1-c0) - elapsed) / elapsed * 1e6
	slackPPM := float64(w0+w1) / 2 / elapsed * 1e6
	t.Logf("%s over %v of %s: %+.2f ppm (brackets ±%.2f ppm)", name, time.Duration(r1-r0), rawClockName, offPPM, slackPPM)
	assert.InDelta(t, 0, offPPM, ppm+slackPPM, "%s's Clock disagrees with %s", name, rawClockName)
}

func TestWithMeasuredRate(t *testing.T) {
	refusal := errors.New("refused")
	_, err := withMeasuredRate(Source{Name: "x", Read: readMono, Bits: 64, Rate: 5}, rateDeviceTree, refusal)
	assert.Equal(t, refusal, err, "a probe's error is returned as it is")

	stated := Source{Name: "mono", Read: readMono, Bits: 64, Rate: 1_000_000_000}
	src, err := withMeasuredRate(stated, rateDeviceTree, nil)
	require.NoError(t, err)
	assert.Equal(t, stated.Rate, src.Rate, "a stated rate that holds is kept as it is")

	// A stated rate the counter does not follow (qemu-loongarch64's
	// CPUCFG) is replaced by a measured one.
	stated.Rate = 100_000_000
	src, err = withMeasuredRate(stated, rateCPUCFG, nil)
	require.NoError(t, err)
	assert.InDelta(t, 1e9, float64(src.Rate), 1e9*600e-6)

	// Go's monotonic clock as the counter: 1 GHz against the raw clock,
	// off by no more than the kernel's NTP steering (at most 500 ppm).
	src, err = withMeasuredRate(Source{Name: "mono", Read: readMono, Bits: 64}, rateMeasured, nil)
	require.NoError(t, err)
	assert.InDelta(t, 1e9, float64(src.Rate), 1e9*600e-6)

	_, err = withMeasuredRate(Source{Name: "stuck", Read: func() uint64 { return 7 }, Bits: 64}, rateMeasured, nil)
	assert.ErrorIs(t, err, errUntrusted)
	assert.EqualError(t, err, `schedclock: counter not trusted "stuck": measuring its rate against `+rawClockName+": counter or reference did not advance")
}

// timerEntries are the four counters' entries, with the clocksource the
// kernel registers each under.
var timerEntries = []struct {
	entry *counter
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
		if e.entry.arch == runtime.GOARCH {
			assert.Contains(t, counterTable(), e.entry, e.name)
		} else {
			assert.NotContains(t, counterTable(), e.entry, "%s: another architecture's counter in the table", e.name)
		}
		assert.Equal(t, e.want, e.entry.verdict().Want, "%s follows the kernel's word on its own clocksource", e.name)
		assert.NotNil(t, e.entry.prepare, "%s checks what a read costs", e.name)
		src, _, _, err := e.entry.probe()
		if e.entry.arch != runtime.GOARCH {
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
		probe := func() (Source, rateOrigin, float64, error) { return hw, rateArchitected, 0, nil }
		for _, current := range []string{e.want, "kvm-clock"} {
			t.Run(e.name+" on "+current, func(t *testing.T) {
				path := filepath.Join(dir, e.name+"-"+current)
				require.NoError(t, os.WriteFile(path, []byte(current+"\n"), 0o644))
				c := newChosenDefaultClock([]*counter{{arch: runtime.GOARCH, probe: probe,
					verdict: func() kernel.Verdict { return kernel.ReadVerdict(path, e.entry.verdict().Want) }}})
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

func TestPrepareReadCost(t *testing.T) {
	src := Source{Name: "fast", Read: func() uint64 { return 42 }, Bits: 64}
	prepared, check := prepareReadCost(src)
	assert.Equal(t, funcPtr(src.Read), funcPtr(prepared.Read), "the read is kept as it is")
	found, err := check()
	require.NoError(t, err)
	assert.Contains(t, found, "fast: read ")

	_, check = prepareReadCost(Source{Name: "off", Read: readMono, Bits: 64, Rate: 100_000_000})
	_, err = check()
	assert.ErrorIs(t, err, errUntrusted)
	assert.EqualError(t, err, `schedclock: counter not trusted "off": does not run at the stated 100000000 Hz`)

	_, check = prepareReadCost(Source{Name: "trapped", Read: slowRead, Bits: 64})
	found, err = check()
	assert.ErrorIs(t, err, errUntrusted)
	assert.Contains(t, err.Error(), `"trapped": read `)
	assert.Contains(t, err.Error(), "slower than the portable source")
	assert.Contains(t, found, "slower than the portable source")
}

func TestTimerRateOriginNames(t *testing.T) {
	assert.Equal(t, rateRefined+1, rateDeviceTree, "the new origins follow the old ones: none changes its number")
	for o, name := range map[rateOrigin]string{
		rateDeviceTree: "device tree", rateCPUInfo: "cpuinfo", rateArchitected: "architected", rateCPUCFG: "cpucfg",
	} {
		assert.Equal(t, name, o.String())
	}
}
func TestRDTIME(t *testing.T) {
	testTimerCounter(t, timerCounter{
		name: "rdtime", arch: "riscv64", supported: hwcounter.RDTIMESupported,
		construct: rdtimeTimer.source, probe: probeRDTIME,
		origins: []rateOrigin{rateDeviceTree, rateMeasured},
	})
}

func TestRDTIMERate(t *testing.T) {
	rate, origin, errPPM, err := rdtimeRate([]byte{0x00, 0x98, 0x96, 0x80}, nil)
	require.NoError(t, err)
	assert.Equal(t, uint64(10_000_000), rate)
	assert.Equal(t, rateDeviceTree, origin)
	assert.Equal(t, float64(nominalRateErrPPM), errPPM)

	// No device tree (qemu-user, ACPI): measured.
	rate, origin, _, err = rdtimeRate(nil, fs.ErrNotExist)
	require.NoError(t, err)
	assert.Equal(t, rateMeasured, origin)
	assert.Zero(t, rate)

	for _, tt := range []struct {
		name     string
		property []byte
		readErr  error
		msg      string
	}{
		{"unreadable", nil, fs.ErrPermission,
			`schedclock: counter not trusted "rdtime": reading /proc/device-tree/cpus/timebase-frequency: permission denied`},
		{"zero", []byte{0, 0, 0, 0}, nil,
			`schedclock: counter not trusted "rdtime": /proc/device-tree/cpus/timebase-frequency: timebase: no counter rate: timebase-frequency is 0`},
		{"two cells", []byte{0, 0, 0, 0, 0, 0x98, 0x96, 0x80}, nil,
			`schedclock: counter not trusted "rdtime": /proc/device-tree/cpus/timebase-frequency: timebase: no counter rate: timebase-frequency is 8 bytes, want one 32-bit cell (4 bytes)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rate, _, _, err := rdtimeRate(tt.property, tt.readErr)
			assert.ErrorIs(t, err, errUntrusted)
			assert.EqualError(t, err, tt.msg)
			assert.Zero(t, rate)
		})
	}
}
func TestTimeBase(t *testing.T) {
	testTimerCounter(t, timerCounter{
		name: "timebase", arch: "ppc64le", supported: hwcounter.TimeBaseSupported,
		construct: timebaseTimer.source, probe: probeTimeBase,
		origins: []rateOrigin{rateCPUInfo, rateMeasured},
	})
}

func TestTimeBaseRate(t *testing.T) {
	power9, err := os.ReadFile("internal/timebase/testdata/cpuinfo/power9-powernv")
	require.NoError(t, err)
	rate, origin, errPPM, err := timebaseRate(power9, nil)
	require.NoError(t, err)
	assert.Equal(t, uint64(512_000_000), rate)
	assert.Equal(t, rateCPUInfo, origin)
	assert.Equal(t, float64(nominalRateErrPPM), errPPM)

	// Another architecture's cpuinfo (qemu-user on this machine), or none:
	// measured.
	host, err := os.ReadFile("internal/timebase/testdata/cpuinfo/qemu-user-on-amd64-epyc")
	require.NoError(t, err)
	for _, in := range []struct {
		cpuinfo []byte
		readErr error
	}{{host, nil}, {nil, fs.ErrNotExist}} {
		rate, origin, _, err = timebaseRate(in.cpuinfo, in.readErr)
		require.NoError(t, err)
		assert.Equal(t, rateMeasured, origin)
		assert.Zero(t, rate)
	}

	for _, tt := range []struct {
		name    string
		cpuinfo string
		readErr error
		msg     string
	}{
		{"unreadable", "", fs.ErrPermission, `schedclock: counter not trusted "timebase": reading /proc/cpuinfo: permission denied`},
		{"zero", "timebase\t: 0\n", nil, `schedclock: counter not trusted "timebase": /proc/cpuinfo: timebase: no counter rate: cpuinfo timebase is 0`},
		{"not a number", "timebase\t: 512MHz\n", nil, `schedclock: counter not trusted "timebase": /proc/cpuinfo: timebase: no counter rate: cpuinfo timebase "512MHz" is not a rate in Hz`},
		{"two rates", "timebase\t: 512000000\ntimebase\t: 1\n", nil, `schedclock: counter not trusted "timebase": /proc/cpuinfo: timebase: no counter rate: cpuinfo gives two timebase rates, 512000000 and 1`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rate, _, _, err := timebaseRate([]byte(tt.cpuinfo), tt.readErr)
			assert.ErrorIs(t, err, errUntrusted)
			assert.EqualError(t, err, tt.msg)
			assert.Zero(t, rate)
		})
	}
}
func TestTOD(t *testing.T) {
	testTimerCounter(t, timerCounter{
		name: "tod", arch: "s390x", supported: hwcounter.TODSupported,
		construct: todTimer.source, probe: probeTOD,
		origins: []rateOrigin{rateArchitected},
	})
}

// TestTODRate: bit 51 of the TOD clock is one microsecond, so one µs is
// 1<<(63-51) units.
func TestTODRate(t *testing.T) {
	assert.Equal(t, uint64(1)<<(63-51)*1_000_000, uint64(todRate))
}
func TestStableCounter(t *testing.T) {
	testTimerCounter(t, timerCounter{
		name: "stablecounter", arch: "loong64", supported: hwcounter.StableCounterSupported,
		construct: stableCounterTimer.source, probe: probeStableCounter,
		origins: []rateOrigin{rateCPUCFG},
	})
}

// TestCPUCFGHere logs the words the kernel's calc_const_freq reads (the
// fuzz target's seed is qemu-loongarch64's) and checks that they give
// the rate the probe states (StableCounter's may be measured: under
// qemu-user the counter does not follow it).
func TestCPUCFGHere(t *testing.T) {
	if !hwcounter.StableCounterSupported {
		assert.Zero(t, hwcounter.CPUCFG(4))
		t.Skip("no CPUCFG in this build: ", noAsmReason("loong64"))
	}
	t.Logf("CPUCFG 2 %#x, 4 %d, 5 %#x on %s", hwcounter.CPUCFG(2), hwcounter.CPUCFG(4), hwcounter.CPUCFG(5), runtime.GOARCH)
	rate, err := stableCounterRate(hwcounter.CPUCFG)
	require.NoError(t, err)
	src, origin, _, err := probeStableCounter()
	require.NoError(t, err)
	assert.Equal(t, rate, src.Rate)
	assert.Equal(t, rateCPUCFG, origin)
}

func TestStableCounterRate(t *testing.T) {
	words := func(cfg2, cfg4, cfg5 uint32) func(uint32) uint32 {
		return func(leaf uint32) uint32 { return map[uint32]uint32{2: cfg2, 4: cfg4, 5: cfg5}[leaf] }
	}
	rate, err := stableCounterRate(words(1<<14, 100_000_000, 1<<16|1))
	require.NoError(t, err)
	assert.Equal(t, uint64(100_000_000), rate)

	for _, tt := range []struct {
		name             string
		cfg2, cfg4, cfg5 uint32
		msg              string
	}{
		{"no constant-frequency timer", 0, 100_000_000, 1<<16 | 1,
			`schedclock: counter not trusted "stablecounter": timebase: no counter rate: CPUCFG 2 (0x0) has no constant-frequency timer (LLFTP, bit 14)`},
		{"no base clock", 1 << 14, 0, 1<<16 | 1,
			`schedclock: counter not trusted "stablecounter": timebase: no counter rate: CPUCFG gives base 0 Hz, multiplier 1, divisor 1 (firmware left one at 0)`},
		{"no divisor", 1 << 14, 100_000_000, 1,
			`schedclock: counter not trusted "stablecounter": timebase: no counter rate: CPUCFG gives base 100000000 Hz, multiplier 1, divisor 0 (firmware left one at 0)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rate, err := stableCounterRate(words(tt.cfg2, tt.cfg4, tt.cfg5))
			assert.ErrorIs(t, err, errUntrusted)
			assert.EqualError(t, err, tt.msg)
			assert.Zero(t, rate)
		})
	}
}
