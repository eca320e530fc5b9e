package schedclock_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/internal/testenv"
	"github.com/stretchr/testify/assert"
)

// TestDeadlineOnTheDefaultClockIsOnTime: the runtime's timer ends a
// default clock's context when the clock reaches its deadline: for each
// of 50 deadlines 1-20 ms away, how late the default clock reads it done
// is how late the runtime's timer was by its own clock (against the
// context's Deadline) to within 1 ms, and it is never early (a real-time
// bound: the qualification layer). How late the runtime's timer itself
// runs is the time package's, and grows with the machine's load: it is
// logged, not bounded.
func TestDeadlineOnTheDefaultClockIsOnTime(t *testing.T) {
	testenv.Qualify(t)
	var late, apart []time.Duration
	for i := range 50 {
		dl := schedclock.Now().Add(time.Duration(1+i%20) * time.Millisecond)
		ctx, cancel := schedclock.Default().WithDeadline(context.Background(), dl)
		<-ctx.Done()
		now, wall := schedclock.Now(), time.Now()
		at, _ := ctx.Deadline()
		cancel()
		late = append(late, now.Sub(dl))
		apart = append(apart, now.Sub(dl)-wall.Sub(at))
	}
	slices.Sort(late)
	slices.Sort(apart)
	t.Logf("done after the deadline, on the default clock (%s): min %v, median %v, max %v; minus the runtime timer's own lateness: %v to %v",
		schedclock.Default().Info().Source, late[0], late[len(late)/2], late[len(late)-1], apart[0], apart[len(apart)-1])
	assert.GreaterOrEqual(t, late[0], -50*time.Microsecond, "done before the deadline")
	assert.GreaterOrEqual(t, apart[0], -time.Millisecond, "the clock's lateness, less the timer's")
	assert.LessOrEqual(t, apart[len(apart)-1], time.Millisecond, "the clock's lateness, less the timer's")
}
