package integrations_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/schedclock/schedclock"
	"github.com/stretchr/testify/require"
)

// zerolog reads the package-level TimestampFunc for every event with a
// timestamp; set it once, at start-up.
func Example_zerolog() {
	zerolog.TimestampFunc = schedclock.WallNow
	zerolog.TimeFieldFormat = zerolog.TimeFormatUnixNano // the default, RFC 3339, keeps whole seconds

	var out bytes.Buffer
	logger := zerolog.New(&out).With().Timestamp().Logger()
	logger.Info().Str("path", "/").Msg("request served")

	var line struct {
		Time    int64
		Message string
	}
	_ = json.Unmarshal(out.Bytes(), &line)
	// The time differs from run to run: print how old it is.
	fmt.Println(line.Message, time.Since(time.Unix(0, line.Time)) < time.Second)
	// Output: request served true
}

// setZerolog sets zerolog's globals for the test and restores them after.
func setZerolog(tb testing.TB, now func() time.Time, format string) {
	oldNow, oldFormat := zerolog.TimestampFunc, zerolog.TimeFieldFormat
	zerolog.TimestampFunc, zerolog.TimeFieldFormat = now, format
	tb.Cleanup(func() { zerolog.TimestampFunc, zerolog.TimeFieldFormat = oldNow, oldFormat })
}

func TestZerologStampsWithWallNow(t *testing.T) {
	setZerolog(t, schedclock.WallNow, zerolog.TimeFormatUnixNano)
	var out bytes.Buffer
	logger := zerolog.New(&out).With().Timestamp().Logger()
	var stamps []stamp
	for i := range stampLines {
		out.Reset()
		before := time.Now()
		logger.Info().Int("i", i).Msg("line")
		after := time.Now()
		var line struct{ Time int64 }
		require.NoError(t, json.Unmarshal(out.Bytes(), &line))
		stamps = append(stamps, stamp{before: before, at: time.Unix(0, line.Time), after: after})
		pauseBetweenLines(i)
	}
	checkStamps(t, stamps)
}
