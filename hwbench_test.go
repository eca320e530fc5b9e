package schedclock

import (
	"slices"
	"testing"
	"time"

	"github.com/schedclock/schedclock/internal/cpu"
	"github.com/schedclock/schedclock/internal/testcounter"
)

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
	defer c.mu.Unlock()
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

// BenchmarkRDTSCP compares the two ordered TSC reads: LFENCE; RDTSC (what
// the clock uses) and RDTSCP, each followed by the same dependent load.
// Where RDTSCP is faster, the clock's reader should use it (issue 8); on
// a CPU without it the RDTSCP half cannot run and says so.
func BenchmarkRDTSCP(b *testing.B) {
	readTSC := tscReader()
	if readTSC == nil {
		b.Skip("no TSC reader in this build: ", tscUnsupportedReason())
	}
	b.Run("lfence-rdtsc", func(b *testing.B) {
		var s uint64
		for b.Loop() {
			s += readTSC()
		}
		hwSink += s
	})
	b.Run("rdtscp", func(b *testing.B) {
		if !cpu.HasRDTSCP(cpu.CPUID) {
			b.Skip("this CPU has no RDTSCP (CPUID 0x80000001 EDX bit 27 clear)")
		}
		var s uint64
		for b.Loop() {
			s += testcounter.ReadTSCP()
		}
		hwSink += s
	})
}

func TestRDTSCPWhereSupported(t *testing.T) {
	readTSC := tscReader()
	if readTSC == nil || !cpu.HasRDTSCP(cpu.CPUID) {
		t.Log("no RDTSCP on this CPU or in this build: nothing to compare")
		return
	}
	a, b := testcounter.ReadTSCP(), readTSC()
	if b < a {
		t.Fatalf("RDTSCP read %d, a later LFENCE;RDTSC %d: not the same counter?", a, b)
	}
}
