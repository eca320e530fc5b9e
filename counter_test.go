package schedclock

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/cpu"
	"github.com/schedclock/schedclock/internal/hwcounter"
)

// The table's walk, and what every counter's tests (source_tsc_test.go,
// source_cntvct_test.go) assert of a counter: that a refusal says why,
// that it counts, and that its rate agrees with the raw clock.

// TestChooseCounterWalksTheTableInOrder: the walk skips the counters of
// other architectures, takes the first whose probe succeeds, and where
// none does, returns every refusal in one error that wraps each.
func TestChooseCounterWalksTheTableInOrder(t *testing.T) {
	probed := []string{}
	entry := func(name, arch string, err error) *counter {
		return &counter{arch: arch, probe: func() (Source, rateOrigin, float64, error) {
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

	ch := chooseCounter([]*counter{other, first, second, third})
	assert.Same(t, second, ch.desc)
	assert.Equal(t, "second", ch.src.Name)
	assert.Equal(t, rateCPUID, ch.origin)
	assert.NoError(t, ch.err)
	assert.Equal(t, []string{"first", "second"}, probed, "a counter of another arch was probed, or the walk went on")

	probed = nil
	ch = chooseCounter([]*counter{first, other, entry("second", runtime.GOARCH, unsupported)})
	assert.Nil(t, ch.desc)
	assert.ErrorIs(t, ch.err, errUntrusted)
	assert.ErrorIs(t, ch.err, ErrUnsupported)
	assert.EqualError(t, ch.err, untrusted.Error()+"; "+unsupported.Error())

	ch = chooseCounter([]*counter{other})
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
	if cpu.Emulated() && !statedRateHolds(src) {
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

var hwSink uint64

// hwSource is the machine's hardware counter with a rate, whether or not
// the default clock trusts it here (the benchmarks measure the read path,
// not the counter's trustworthiness).
func hwSource(tb testing.TB) (Source, bool) {
	hw, _, _, err := probeHardware()
	switch {
	case err == nil:
	case hwcounter.TSCSupported:
		hw = Source{Name: "tsc", Read: hwcounter.TSC(), Bits: 64}
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
