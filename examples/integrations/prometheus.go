package integrations

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/schedclock/schedclock"
)

// Instrument returns next observed: how long it takes to serve each
// request, in seconds, goes to latency (a prometheus.Histogram or
// Summary, or a HistogramVec's WithLabelValues). The request is timed
// with schedclock.Now and Since; Observe takes float64 seconds, hence
// Since(start).Seconds().
func Instrument(next http.Handler, latency prometheus.Observer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := schedclock.Now()
		next.ServeHTTP(w, r)
		latency.Observe(schedclock.Since(start).Seconds())
	})
}

// InstrumentStd is Instrument timed with time.Now and time.Since, for
// comparison (promhttp.InstrumentHandlerDuration times requests the
// same way).
func InstrumentStd(next http.Handler, latency prometheus.Observer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		next.ServeHTTP(w, r)
		latency.Observe(time.Since(start).Seconds())
	})
}
