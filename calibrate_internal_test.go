package schedclock

import (
	"testing"
	"time"
)

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
