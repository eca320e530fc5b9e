package integrations

import (
	"go.uber.org/zap/zapcore"

	"github.com/schedclock/schedclock/adapt"
)

// zap takes a zapcore.Clock: adapt.Clock is one, its Now
// schedclock.WallNow (or a Clock's wall time, with adapt.On), its
// NewTicker time's own (zap's sampler):
//
//	logger := zap.New(core, zap.WithClock(adapt.Clock{}))
//
// zap reads its Clock once per entry, after the level check, and nowhere
// else, so the clock read is all that changes.
var _ zapcore.Clock = adapt.Clock{}
