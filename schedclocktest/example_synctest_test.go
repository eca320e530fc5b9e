package schedclocktest_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/schedclocktest"
)

// Session is the code under test: it expires a minute after its last
// use, and reads its time from the *schedclock.Clock it was given rather
// than from the package's default clock, which never follows a bubble's
// fake time.
type Session struct {
	clock    *schedclock.Clock
	lastUsed schedclock.Instant
}

func NewSession(c *schedclock.Clock) *Session { return &Session{clock: c, lastUsed: c.Now()} }

func (s *Session) Touch() { s.lastUsed = s.clock.Now() }

func (s *Session) Expired() bool { return s.clock.Since(s.lastUsed) >= time.Minute }

// testSessionExpiry is a test as a _test.go file holds it:
//
//	func TestSessionExpiry(t *testing.T) { testSessionExpiry(t) }
//
// Inside the bubble time.Sleep returns at once and the bubble's clock
// moves on by what it slept, and so does the Clock NewBubbleClock made.
func testSessionExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewSession(schedclocktest.NewBubbleClock(t))
		time.Sleep(59 * time.Second)
		if s.Expired() {
			t.Error("expired 59 s after its last use")
		}
		s.Touch()
		time.Sleep(time.Minute)
		if !s.Expired() {
			t.Error("not expired a minute after its last use")
		}
	})
}

// Testing code that reads schedclock with testing/synctest: the code
// takes a *schedclock.Clock, and its tests give it one from
// NewBubbleClock, which follows the bubble's fake time, so that sleeping
// in the bubble moves the code's time without waiting, and its WallTime
// is the bubble's time.Now. Where the test drives time by hand instead,
// NewManualClock is exact and needs no bubble.
func Example_synctest() {
	// In a _test.go file:
	//
	//	func TestSessionExpiry(t *testing.T) { testSessionExpiry(t) }
	var _ = testSessionExpiry
}

// TestSynctestExample runs the package example Synctest's test in its
// bubble: it fails if a Clock on the bubble's time did not follow the
// bubble's sleeps.
func TestSynctestExample(t *testing.T) { testSessionExpiry(t) }
