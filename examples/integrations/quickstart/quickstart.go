// Package quickstart is the README's Quick start, kept where it compiles:
// the lines between the two marker comments below are the README's first
// Go block under "## Quick start", byte for byte, and the test between
// the markers of quickstart_test.go its second (TestReadmeQuickStart).
package quickstart

// README Quick start: begin
import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/schedclock/schedclock"
)

var latency = promauto.NewHistogram(prometheus.HistogramOpts{Name: "request_duration_seconds", Help: "Time to serve a request."})

// Server times each request on Clock, and Handle's context ends Timeout later on Clock.
// A nil Clock is the default clock, the CPU's counter; tests give it a manual one.
type Server struct {
	Clock   *schedclock.Clock
	Timeout time.Duration
	Handle  http.HandlerFunc
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := s.Clock.Now() // an Instant: ns since the clock started; wait-free, never backwards
	ctx, cancel := s.Clock.WithTimeout(r.Context(), s.Timeout)
	defer cancel()
	s.Handle(w, r.WithContext(ctx))
	latency.Observe(s.Clock.Since(start).Seconds()) // Since: a time.Duration, never negative
}

// README Quick start: end

// Latency is the histogram Server observes (registered with the default
// registry by promauto), for tests.
func Latency() prometheus.Histogram { return latency }
