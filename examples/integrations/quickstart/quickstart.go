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
	"github.com/schedclock/schedclock/adapt"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

var latency = promauto.NewHistogram(prometheus.HistogramOpts{Name: "request_duration_seconds", Help: "Time to serve a request."})

func Timed(handle http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := schedclock.Now() // an Instant: ns since the package started; wait-free
		handle(w, r)
		latency.Observe(schedclock.Since(start).Seconds()) // Since: a time.Duration, never negative
	}
}

func Expired(deadline schedclock.Instant) bool { return schedclock.Coarse() >= deadline } // three loads, no system call; 1 ms resolution

func Stamp() time.Time { return schedclock.WallNow() } // wall time from the counter, no monotonic reading

// zap stamps its entries from the counter: adapt.Clock is a zapcore.Clock (and a k8s clock.PassiveClock).
func Logger(core zapcore.Core) *zap.Logger { return zap.New(core, zap.WithClock(adapt.Clock{})) }

// Your own counter, its rate refined and the counter watched against a clock you trust.
func DeviceClock(read func() uint64, hz uint64, ref func() int64) (*schedclock.Clock, error) {
	return schedclock.New(schedclock.Source{Name: "device", Read: read, Bits: 64, Rate: hz}, schedclock.WithReference(ref))
}

// README Quick start: end

// Latency is the histogram Timed observes (registered with the default
// registry by promauto), for tests.
func Latency() prometheus.Histogram { return latency }
