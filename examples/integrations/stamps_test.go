package integrations_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// wallBound is how far WallNow may be from time.Now: the package
// documents "within about 100µs" (its TestWallNowFollowsTheWallClock);
// a stamp is checked against a time.Now bracket widened by it.
const wallBound = 100 * time.Microsecond

// stamp is a timestamp a logger wrote, between two time.Now readings
// taken around the call that wrote it.
type stamp struct {
	before, at, after time.Time
}

// stampLines is how many lines each logger test stamps, and
// pauseBetweenLines pauses 1 ms after every thousandth: the 20,000 lines
// span 20 ms, over which the wall map is re-aimed between lines.
const stampLines = 20_000

func pauseBetweenLines(i int) {
	if i%1000 == 0 {
		time.Sleep(time.Millisecond)
	}
}

// checkStamps asserts that each stamp lies inside its time.Now bracket
// widened by wallBound, that none is earlier than the one before it, and
// that each carries no monotonic reading (so that it is WallNow's, not
// time.Now's). It logs how many lay strictly inside their bracket.
func checkStamps(t *testing.T, stamps []stamp) {
	t.Helper()
	if !assert.NotEmpty(t, stamps) {
		return
	}
	inside, worst, fromTimeNow := 0, time.Duration(0), 0
	for i, s := range stamps {
		at, before, after := s.at.UnixNano(), s.before.UnixNano(), s.after.UnixNano()
		if before <= at && at <= after {
			inside++
		}
		worst = max(worst, time.Duration(before-at), time.Duration(at-after))
		if s.at != s.at.Round(0) {
			fromTimeNow++
		}
		if i > 0 && at < stamps[i-1].at.UnixNano() {
			t.Errorf("stamp %d went back by %v", i, time.Duration(stamps[i-1].at.UnixNano()-at))
		}
	}
	t.Logf("%d of %d stamps inside their time.Now bracket; the farthest outside by %v", inside, len(stamps), max(worst, 0))
	assert.LessOrEqual(t, worst, wallBound, "a stamp outside its time.Now bracket by more than %v", wallBound)
	assert.Zero(t, fromTimeNow, "stamps with a monotonic reading: time.Now's, not WallNow's")
}
