package integrations_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/schedclock/schedclock/examples/integrations"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A request-duration histogram observed in net/http middleware.
func ExampleInstrument() {
	latency := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "http_request_duration_seconds",
		Help:    "Time to serve a request.",
		Buckets: prometheus.DefBuckets,
	})
	prometheus.NewRegistry().MustRegister(latency) // prometheus.MustRegister in a program
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello") })
	srv := httptest.NewServer(integrations.Instrument(hello, latency))
	defer srv.Close()

	resp, err := http.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	_ = resp.Body.Close()

	var m dto.Metric
	_ = latency.Write(&m)
	fmt.Println(m.GetHistogram().GetSampleCount(), "request observed")
	// Output: 1 request observed
}

// observations is a prometheus.Observer that keeps what it is given and
// passes it on.
type observations struct {
	mu   sync.Mutex
	next prometheus.Observer
	all  []float64
}

func (o *observations) Observe(v float64) {
	o.mu.Lock()
	o.all = append(o.all, v)
	o.mu.Unlock()
	o.next.Observe(v)
}

// TestInstrumentAgreesWithTimeSince serves requests through each
// middleware, nested inside a layer that times the whole of it with
// time.Since while the handler times its own work with time.Since too.
// Each observation must lie between the two, give or take the bound
// below: the two clocks agree on durations to within their rates' error
// (NTP slews CLOCK_MONOTONIC, which time.Since follows, by up to
// 500 ppm; 1000 ppm is allowed) plus 1 µs for the reads themselves.
func TestInstrumentAgreesWithTimeSince(t *testing.T) {
	const requests = 100
	for _, tc := range []struct {
		name       string
		instrument func(http.Handler, prometheus.Observer) http.Handler
	}{
		{"schedclock.Since", integrations.Instrument},
		{"time.Since", integrations.InstrumentStd},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hist := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "seconds", Buckets: prometheus.DefBuckets})
			obs := &observations{next: hist}
			var mu sync.Mutex
			var inner, outer []time.Duration
			work := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				start := time.Now()
				if r.URL.Query().Get("sleep") != "" {
					time.Sleep(200 * time.Microsecond)
				}
				_, _ = io.WriteString(w, "ok")
				d := time.Since(start)
				mu.Lock()
				inner = append(inner, d)
				mu.Unlock()
			})
			instrumented := tc.instrument(work, obs)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				start := time.Now()
				instrumented.ServeHTTP(w, r)
				d := time.Since(start)
				mu.Lock()
				outer = append(outer, d)
				mu.Unlock()
			}))
			defer srv.Close()

			for i := range requests {
				url := srv.URL
				if i%2 == 1 {
					url += "?sleep=1"
				}
				resp, err := http.Get(url)
				require.NoError(t, err)
				_, _ = io.Copy(io.Discard, resp.Body)
				require.NoError(t, resp.Body.Close())
			}

			var m dto.Metric
			require.NoError(t, hist.Write(&m))
			assert.Equal(t, uint64(requests), m.GetHistogram().GetSampleCount())
			require.Len(t, obs.all, requests)
			require.Len(t, outer, requests)
			agree := 0
			var sum float64
			for i, seconds := range obs.all {
				got := time.Duration(seconds * 1e9)
				sum += outer[i].Seconds()
				slack := time.Microsecond + outer[i]/1000
				if got >= inner[i]-slack && got <= outer[i]+slack {
					agree++
				} else {
					t.Errorf("request %d: observed %v, handler's own time.Since %v, whole middleware's %v", i, got, inner[i], outer[i])
				}
			}
			t.Logf("%d of %d observations between the handler's and the whole middleware's time.Since", agree, requests)
			assert.LessOrEqual(t, m.GetHistogram().GetSampleSum(), sum*1.001+requests*1e-6)
		})
	}
}
