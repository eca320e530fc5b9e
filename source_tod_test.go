package schedclock

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTOD(t *testing.T) {
	testTimerCounter(t, timerCounter{
		name: "tod", arch: "s390x", supported: todSupported,
		construct: todSource, probe: probeTOD,
		origins: []rateOrigin{rateArchitected},
	})
}

// TestTODRate: bit 51 of the TOD clock is one microsecond, so one µs is
// 1<<(63-51) units.
func TestTODRate(t *testing.T) {
	assert.Equal(t, uint64(1)<<(63-51)*1_000_000, uint64(todRate))
}
