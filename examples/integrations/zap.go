package integrations

import (
	"time"

	"github.com/schedclock/schedclock"
	"go.uber.org/zap/zapcore"
)

// ZapClock is a zapcore.Clock that stamps every entry with
// schedclock.WallNow instead of time.Now:
//
//	logger := zap.New(core, zap.WithClock(integrations.ZapClock{}))
//
// zap reads its Clock once per entry, after the level check, and nowhere
// else, so the clock read is all that changes. Tickers (zap's sampler)
// stay time's own.
type ZapClock struct{}

var _ zapcore.Clock = ZapClock{}

// Now is schedclock.WallNow: wall time read from the counter, without a
// monotonic reading.
func (ZapClock) Now() time.Time { return schedclock.WallNow() }

// NewTicker is time.NewTicker.
func (ZapClock) NewTicker(d time.Duration) *time.Ticker { return time.NewTicker(d) }
