package quickstart_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/schedclock/schedclock/examples/integrations/quickstart"
	"github.com/schedclock/schedclock/schedclocktest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// README Quick start test: begin
func TestServerTimesOut(t *testing.T) {
	c, m := schedclocktest.NewManualClock(t) // moves only when told: no sleep, no flake
	s := &quickstart.Server{Clock: c, Timeout: time.Second, Handle: func(w http.ResponseWriter, r *http.Request) {
		m.Advance(999 * time.Millisecond)
		assert.NoError(t, r.Context().Err(), "a millisecond before the timeout")
		m.Advance(time.Millisecond)
		assert.Error(t, r.Context().Err(), "at the timeout")
	}}
	s.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
}

// README Quick start test: end

// histogram returns the sample count and sum of the Server's latency
// histogram.
func histogram(t *testing.T) (uint64, float64) {
	var m dto.Metric
	require.NoError(t, quickstart.Latency().Write(&m))
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// TestServerMeasuresOnItsClock: on a manual clock the histogram gets
// exactly what the clock moved while the request was served.
func TestServerMeasuresOnItsClock(t *testing.T) {
	c, m := schedclocktest.NewManualClock(t)
	s := &quickstart.Server{Clock: c, Timeout: time.Minute, Handle: func(w http.ResponseWriter, r *http.Request) {
		m.Advance(1500 * time.Millisecond)
	}}
	n0, sum0 := histogram(t)
	s.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	n, sum := histogram(t)
	assert.Equal(t, n0+1, n)
	assert.InDelta(t, 1.5, sum-sum0, 1e-9, "the histogram's sum is a float: earlier observations round it")
}

// TestServerOnTheDefaultClock: a Server whose Clock is left nil serves
// on the default clock: each request is observed, at least as long as
// its handler slept, and its context has the timeout's deadline.
func TestServerOnTheDefaultClock(t *testing.T) {
	const requests, work = 20, 2 * time.Millisecond
	srv := httptest.NewServer(&quickstart.Server{Timeout: time.Minute, Handle: func(w http.ResponseWriter, r *http.Request) {
		if dl, ok := r.Context().Deadline(); !ok || time.Until(dl) < 59*time.Second {
			t.Errorf("deadline %v, %v: not a minute away", dl, ok)
		}
		time.Sleep(work)
		_, _ = io.WriteString(w, "ok")
	}})
	defer srv.Close()
	n0, sum0 := histogram(t)
	for range requests {
		resp, err := http.Get(srv.URL)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, http.StatusOK, resp.StatusCode)
	}
	n, sum := histogram(t)
	assert.Equal(t, n0+requests, n)
	assert.GreaterOrEqual(t, sum-sum0, requests*work.Seconds())
}
