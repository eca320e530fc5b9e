//go:build linux

package schedclock_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/internal/cpu"
	"github.com/schedclock/schedclock/internal/race"
	"github.com/schedclock/schedclock/internal/testenv"
)

// wallBrackets is what n brackets a := time.Now(); w := WallNow();
// b := time.Now() found: how many put w before a and after b, the median
// distance of w from the bracket's middle, and the median bracket width.
type wallBrackets struct {
	n, before, after int
	dist, width      time.Duration
}

func measureWallBrackets(n int) wallBrackets {
	r := wallBrackets{n: n}
	dists, widths := make([]time.Duration, n), make([]time.Duration, n)
	for i := range n {
		a := time.Now()
		w := schedclock.WallNow()
		b := time.Now()
		if w.Before(a) {
			r.before++
		}
		if w.After(b) {
			r.after++
		}
		width := b.Round(0).Sub(a.Round(0))
		dists[i] = w.Sub(a.Round(0).Add(width / 2)).Abs()
		widths[i] = width
	}
	slices.Sort(dists)
	slices.Sort(widths)
	r.dist, r.width = dists[n/2], widths[n/2]
	return r
}

// ok says whether WallNow sat inside time.Now's brackets: each side
// missed in at most a tenth of them, and the median distance from the
// middle at most 50 ns, or a quarter of the median bracket where the
// brackets themselves are wider than 200 ns (a loaded machine). Under
// the race detector or user-mode emulation WallNow's own code, which the
// bracket holds after its read of the counter, costs several times more
// than time.Now's and moves the middle after the reading, and the
// emulator's cost of each read differs from the native one's, so that
// a third of the readings can fall out on one side (qemu-aarch64: 35%
// before a, 0.3 µs from the middle of a 0.77 µs bracket): there the
// median reading must lie inside the bracket, half of it from the middle.
func (r wallBrackets) ok() bool {
	if race.Enabled || cpu.Emulated() {
		return r.dist <= r.width/2
	}
	bound := max(50*time.Nanosecond, r.width/4)
	return r.before*10 <= r.n && r.after*10 <= r.n && r.dist <= bound
}

// TestWallNowInsideTimeNowBrackets: in a fresh process, 100 ms after its
// start and again after WallNow has not been read for three seconds (the
// map refreshed at its idle pace), WallNow falls inside
// [time.Now, time.Now] brackets, near their middle: the wall map is
// paired without a bias of its own. Each phase's first WallNow wakes the
// background goroutine, which pairs the map afresh; the phase measures
// once it has (on a loaded machine the woken goroutine can wait for a
// CPU longer than all the brackets take). A phase takes 100,000
// brackets: the medians and the tenths that ok allows each side hold
// through the preemptions and re-aimings of the map that a loaded
// machine puts among them.
func TestWallNowInsideTimeNowBrackets(t *testing.T) {
	testenv.Qualify(t)
	inAProcessOfItsOwn(t, func(t *testing.T) {
		phase := func(name string) {
			woke := schedclock.Now()
			schedclock.WallNow()
			for waited := time.Duration(0); !schedclock.Default().WallPairedAfter(int64(woke)); waited += time.Millisecond {
				require.Less(t, waited, time.Minute, "%s: the woken goroutine never paired the map", name)
				time.Sleep(time.Millisecond)
				schedclock.WallNow() // a use: the default clock's set-up starts at one 10 ms after the first
			}
			r := measureWallBrackets(100_000)
			t.Logf("%s: w before a in %d, after b in %d of %d; median |w - middle| %v, median bracket %v",
				name, r.before, r.after, r.n, r.dist, r.width)
			assert.True(t, r.ok(), "%s: WallNow outside time.Now's brackets: %+v", name, r)
		}
		time.Sleep(100 * time.Millisecond)
		phase("100 ms after start")
		time.Sleep(3 * time.Second)
		phase("after 3 s without WallNow")
	})
}

// TestIdleCostAfterWallNow measures, from outside (getrusage of each
// child process), the CPU a process spends in the idleFor that follow a
// second of Now, Coarse and WallNow, against one that read only Now and
// Coarse (TestIdleCostAfterCoarse bounds that one against a process that
// never reads the clock): at most what ten wake-ups of a bare sleeping
// goroutine cost (half the timer child's, measured beside them: about
// 2.5 ms in this KVM guest, quiet). The wall map is aimed every
// period only while WallNow is read, and otherwise on the wake-ups the
// watch makes anyway: an idle process pays for no pairing of its own
// beyond the period or two after its last read. All four children run
// at once, so the test takes idleFor and a second (and, where the
// set-up's cross-CPU check must be retried, until it has run: see
// settle).
func TestIdleCostAfterWallNow(t *testing.T) {
	spent := idleCosts(t, "wall", "use", "none", "timer")
	t.Logf("CPU over %v idle: %v after a second of Now, Coarse and WallNow, %v after Now and Coarse, %v never reading the clock, %v with %d timer wake-ups",
		idleFor, spent["wall"], spent["use"], spent["none"], spent["timer"], timerWakeUps)
	half := (spent["timer"] - spent["none"]) / 2
	if race.Enabled {
		half *= 4 // as TestIdleCostAfterCoarse: instrumented wake-ups
	}
	assert.LessOrEqual(t, spent["wall"]-spent["use"], half,
		"idle CPU above a process that read only Now and Coarse, against %d timer wake-ups beside it", timerWakeUps/2)
}
