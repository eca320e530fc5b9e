package quickstart_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/examples/integrations/quickstart"
	"github.com/schedclock/schedclock/schedclocktest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestTimedObservesEachRequest(t *testing.T) {
	const requests, work = 20, 2 * time.Millisecond
	srv := httptest.NewServer(quickstart.Timed(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(work)
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	var before dto.Metric
	require.NoError(t, quickstart.Latency().Write(&before))
	for range requests {
		resp, err := http.Get(srv.URL)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
	}
	var m dto.Metric
	require.NoError(t, quickstart.Latency().Write(&m))
	h, h0 := m.GetHistogram(), before.GetHistogram()
	assert.Equal(t, uint64(requests), h.GetSampleCount()-h0.GetSampleCount())
	// Each observation is at least the handler's sleep, in seconds.
	assert.GreaterOrEqual(t, h.GetSampleSum()-h0.GetSampleSum(), requests*work.Seconds())
}

func TestExpired(t *testing.T) {
	assert.False(t, quickstart.Expired(schedclock.Now().Add(time.Hour)))
	assert.True(t, quickstart.Expired(schedclock.Coarse()))
}

func TestStamp(t *testing.T) {
	s := quickstart.Stamp()
	assert.Less(t, time.Since(s), time.Second)
	assert.Equal(t, s, s.Round(0), "no monotonic reading")
}

func TestDeviceClock(t *testing.T) {
	var counter atomic.Uint64
	start := time.Now()
	reference := func() int64 { return int64(time.Since(start)) }
	c, err := quickstart.DeviceClock(counter.Load, 1_000_000, reference)
	require.NoError(t, err)
	defer c.Close()
	counter.Add(2500) // 2.5 ms at 1 MHz
	assert.Equal(t, schedclock.Instant(2_500_000), c.Now())
}

// TestManualClock: the README's way to test code that takes a Clock.
func TestManualClock(t *testing.T) {
	c, m := schedclocktest.NewManualClock(t)
	start := c.Now()
	m.Advance(time.Second)
	assert.Equal(t, time.Second, c.Since(start))
}

func TestLoggerStampsFromTheCounter(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	before := schedclock.WallNow()
	quickstart.Logger(core).Info("served")
	after := schedclock.WallNow()
	require.Len(t, logs.All(), 1)
	at := logs.All()[0].Time
	assert.Equal(t, at, at.Round(0), "no monotonic reading: not time.Now's")
	assert.False(t, at.Before(before) || at.After(after), "%v outside [%v, %v]", at, before, after)
}
