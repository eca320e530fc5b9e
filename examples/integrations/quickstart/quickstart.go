// Package quickstart is the README's Quick start, kept where it compiles:
// the lines between the two marker comments below are the README's Go
// block under "## Quick start", byte for byte (TestReadmeQuickStart).
package quickstart

// README Quick start: begin
import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/schedclocktest"
)

var latency = promauto.NewHistogram(prometheus.HistogramOpts{Name: "request_duration_seconds", Help: "Time to serve a request."})

func Timed(handle http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := schedclock.Now() // ns since the package started; wait-free
		handle(w, r)
		latency.Observe(schedclock.Since(start).Seconds()) // Since: a time.Duration, never negative
	}
}

func Expired(deadline schedclock.Instant) bool { return schedclock.Coarse() >= deadline } // three loads, no system call; 1 ms resolution

func Stamp() time.Time { return schedclock.WallNow() } // wall time from the counter, no monotonic reading

// Your own counter, its rate refined and the counter watched against a clock you trust.
func DeviceClock(read func() uint64, hz uint64, ref func() int64) (*schedclock.Clock, error) {
	return schedclock.New(schedclock.Source{Name: "device", Read: read, Bits: 64, Rate: hz}, schedclock.WithReference(ref))
}

// In tests: a counter that moves only when told (m.Advance), no sleeping.
func ManualClock() (c *schedclock.Clock, m *schedclocktest.Manual, err error) {
	if m, err = schedclocktest.NewManual(1e9, 64); err != nil {
		return nil, nil, err
	}
	c, err = schedclock.New(m.Source())
	return c, m, err
}

// README Quick start: end

// Latency is the histogram Timed observes (registered with the default
// registry by promauto), for tests.
func Latency() prometheus.Histogram { return latency }
