package integrations_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/schedclock/schedclock/adapt"
	"github.com/schedclock/schedclock/examples/integrations"
	"github.com/schedclock/schedclock/schedclocktest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dropTime leaves the time out of the examples' output, which differs
// from run to run.
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey && len(groups) == 0 {
		return slog.Attr{}
	}
	return a
}

// With log/slog, keep slog's own time: slog.Logger calls time.Now for
// every record before any Handler sees it, so there is no clock read for
// schedclock to save.
func Example_slog() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: dropTime}))
	logger.Info("request served", "path", "/")
	// Output: level=INFO msg="request served" path=/
}

// LogWallNow stamps a record with WallNow instead of time.Now, one clock
// read per record: for records that must carry the counter's wall time.
func ExampleLogWallNow() {
	h := slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: dropTime})
	integrations.LogWallNow(context.Background(), h, slog.LevelInfo, "request served", "path", "/")
	// Output: level=INFO msg="request served" path=/
}

// StampHandler re-stamps records that slog.Logger has stamped already:
// two clock reads per record, slower than slog alone.
func ExampleStampHandler() {
	logger := slog.New(integrations.StampHandler{Handler: slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: dropTime})})
	logger.Info("request served", "path", "/")
	// Output: {"level":"INFO","msg":"request served","path":"/"}
}

// records is a slog.Handler that keeps the records it is given.
type records struct {
	mu  sync.Mutex
	all []slog.Record
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *records) WithGroup(string) slog.Handler            { return h }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.all = append(h.all, r)
	return nil
}

// TestSlogStampsBeforeTheHandler is why a re-stamping Handler costs a
// second clock read: the record a Handler receives from slog.Logger
// already carries time.Now (with its monotonic reading).
func TestSlogStampsBeforeTheHandler(t *testing.T) {
	var h records
	before := time.Now()
	slog.New(&h).Info("line")
	after := time.Now()
	require.Len(t, h.all, 1)
	at := h.all[0].Time
	assert.NotEqual(t, at, at.Round(0), "slog stamped the record with time.Now")
	assert.False(t, at.Before(before) || at.After(after))
}

func TestStampHandlerStampsWithWallNow(t *testing.T) {
	var h records
	logger := slog.New(integrations.StampHandler{Handler: &h}).With("k", "v").WithGroup("g")
	stamps := logLines(func(i int) { logger.Info("line", "i", i) })
	for i, r := range h.all {
		stamps[i].at = r.Time
	}
	checkStamps(t, stamps)
}

// TestStampHandlerOnAManualClock: a StampHandler given a Clock (here a
// test's, on a Manual counter) stamps every record, through derived
// Handlers too, with that Clock's wall time, exactly.
func TestStampHandlerOnAManualClock(t *testing.T) {
	c, m := schedclocktest.NewManualClock(t)
	origin := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	m.SetWallOrigin(origin)
	var h records
	logger := slog.New(integrations.StampHandler{Handler: &h, Clock: adapt.On(c)}).With("k", "v").WithGroup("g")
	logger.Info("first")
	m.Advance(1500 * time.Millisecond)
	logger.Info("second")
	require.Len(t, h.all, 2)
	assert.True(t, h.all[0].Time.Equal(origin), "first record at %v", h.all[0].Time)
	assert.True(t, h.all[1].Time.Equal(origin.Add(1500*time.Millisecond)), "second record at %v", h.all[1].Time)
}

func TestLogWallNowStampsWithWallNow(t *testing.T) {
	var h records
	stamps := logLines(func(i int) {
		integrations.LogWallNow(context.Background(), &h, slog.LevelInfo, "line", "i", i)
	})
	for i, r := range h.all {
		stamps[i].at = r.Time
	}
	checkStamps(t, stamps)

	// The record's pc is the caller's, as with slog.Logger (AddSource).
	frame, _ := runtime.CallersFrames([]uintptr{h.all[0].PC}).Next()
	assert.Equal(t, "slog_test.go", filepath.Base(frame.File))
}

// logLines calls logLine 20,000 times and returns the time.Now brackets
// around the calls.
func logLines(logLine func(i int)) []stamp {
	var stamps []stamp
	for i := range stampLines {
		before := time.Now()
		logLine(i)
		after := time.Now()
		stamps = append(stamps, stamp{before: before, after: after})
		pauseBetweenLines(i)
	}
	return stamps
}
