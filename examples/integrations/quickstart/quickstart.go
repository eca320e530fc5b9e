// Package quickstart is the README's Quick start, kept where it compiles:
// the lines between the two marker comments below are the README's Go
// block under "## Quick start", byte for byte (TestReadmeQuickStart).
package quickstart

// README Quick start: begin
import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/schedclock/schedclock"
)

var latency = prometheus.NewHistogram(prometheus.HistogramOpts{
	Name: "request_duration_seconds",
	Help: "Time to serve a request.",
})

// Timed times each request. Now is nanoseconds since the package
// started, wait-free; Since is a time.Duration, never negative; the
// histogram takes float64 seconds.
func Timed(handle http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := schedclock.Now()
		handle(w, r)
		latency.Observe(schedclock.Since(start).Seconds())
	}
}

// Expired checks a deadline taken as schedclock.Now() + d or
// schedclock.Coarse() + d. Coarse is one atomic load of a value kept
// current every 1 ms: for deadlines, caches and rate limits.
func Expired(deadline int64) bool { return schedclock.Coarse() >= deadline }

// Stamp is wall time read from the counter, with no monotonic reading:
// a timestamp to record, not to measure with (subtract Now readings).
func Stamp() time.Time { return schedclock.WallNow() }

// DeviceClock is a Clock on a counter of your own, its rate refined and
// the counter watched against a reference you trust (a PTP clock, say).
func DeviceClock(read func() uint64, hz uint64, reference func() int64) (*schedclock.Clock, error) {
	return schedclock.New(schedclock.Source{Name: "device", Read: read, Bits: 64, Rate: hz},
		schedclock.WithReference(reference))
}

// ManualClock is for tests: a Clock on a counter that moves only when told,
// so m.Advance(time.Second) moves c by exactly one second, no sleeping.
func ManualClock() (c *schedclock.Clock, m *schedclock.Manual, err error) {
	m = schedclock.NewManual(1e9, 64) // 1 GHz, 64 bits
	c, err = schedclock.New(m.Source())
	return c, m, err
}

// README Quick start: end

// Latency is the histogram Timed observes, for tests and registration.
func Latency() prometheus.Histogram { return latency }
