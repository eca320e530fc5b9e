package format

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestStampIsRFC3339NanoInUTC compares stamp with the time package's
// own formatting over fixed edges and random instants from year -9999
// to 9999.
func TestStampIsRFC3339NanoInUTC(t *testing.T) {
	times := []time.Time{
		time.Unix(0, 0), time.Unix(-1, 0), time.Unix(-1, 999_999_999), time.Unix(951_782_400, 0), // 2000-02-29
		time.Unix(4_107_542_400, 100), time.Date(-1, 12, 31, 23, 59, 59, 1, time.UTC),
		time.Date(1600, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(2100, 2, 28, 12, 0, 0, 500_000_000, time.UTC),
		time.Now(),
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		times = append(times, time.Unix(r.Int64N(2*315_537_897_600)-315_537_897_600, r.Int64N(1e9)))
	}
	for _, tm := range times {
		if want := tm.UTC().Format(time.RFC3339Nano); !assert.Equal(t, want, Stamp(tm)) {
			return
		}
	}
}
