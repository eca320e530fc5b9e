package integrations_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/schedclock/schedclock/adapt"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A zap logger that stamps entries with schedclock.WallNow: adapt.Clock
// is a zapcore.Clock.
func Example_zap() {
	cfg := zap.NewProductionEncoderConfig()
	// Here only, so that the output is the same on every run: print, in
	// place of the time, whether it is WallNow's (no monotonic reading).
	cfg.EncodeTime = func(t time.Time, enc zapcore.PrimitiveArrayEncoder) {
		enc.AppendString(fmt.Sprint("wallnow=", t == t.Round(0)))
	}
	core := zapcore.NewCore(zapcore.NewJSONEncoder(cfg), zapcore.AddSync(os.Stdout), zap.InfoLevel)
	logger := zap.New(core, zap.WithClock(adapt.Clock{}))
	logger.Info("request served", zap.String("path", "/"))
	// Output: {"level":"info","ts":"wallnow=true","msg":"request served","path":"/"}
}

func TestZapStampsWithWallNow(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	logger := zap.New(core, zap.WithClock(adapt.Clock{}))
	var stamps []stamp
	for i := range stampLines {
		before := time.Now()
		logger.Info("line", zap.Int("i", i))
		after := time.Now()
		stamps = append(stamps, stamp{before: before, after: after})
		pauseBetweenLines(i)
	}
	for i, e := range logs.All() {
		stamps[i].at = e.Time
	}
	checkStamps(t, stamps)
}
