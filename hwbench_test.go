package schedclock

import (
	"testing"
	"time"
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
