package schedclock_test

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/internal/cpu"
	"github.com/schedclock/schedclock/internal/vdso"
)

// kernelBrackets is what n brackets a := clock_gettime(id);
// m := KernelTime(k, Now()); b := clock_gettime(id) found: how many put
// m outside [a, b], the worst distance outside, and the median bracket.
type kernelBrackets struct {
	n, outside    int
	worst, median time.Duration
}

func (r kernelBrackets) String() string {
	return fmt.Sprintf("%d of %d outside (worst by %v), median bracket %v", r.outside, r.n, r.worst, r.median)
}

// countKernelBrackets takes n brackets a := clock_gettime(id);
// m := KernelTime(k, c.Now()); b := clock_gettime(id), back to back.
func countKernelBrackets(t *testing.T, c *schedclock.Clock, k schedclock.KernelClock, id vdso.ID, n int) kernelBrackets {
	vc, err := vdso.Open(id)
	require.NoError(t, err)
	var r kernelBrackets
	widths := make([]time.Duration, 0, n)
	for range n {
		r.add(t, vc, c, k, &widths)
	}
	return r.done(widths)
}

// add takes one bracket and counts it.
func (r *kernelBrackets) add(t *testing.T, vc *vdso.Clock, c *schedclock.Clock, k schedclock.KernelClock, widths *[]time.Duration) {
	a := vc.Now()
	m, ok := c.KernelTime(k, c.Now())
	b := vc.Now()
	require.True(t, ok)
	r.n++
	if out := max(a-m, m-b); out > 0 {
		r.outside++
		r.worst = max(r.worst, time.Duration(out))
	}
	*widths = append(*widths, time.Duration(b-a))
}

// done sets the median bracket of widths.
func (r kernelBrackets) done(widths []time.Duration) kernelBrackets {
	slices.Sort(widths)
	r.median = widths[len(widths)/2]
	return r
}

// kernelClocks are the kernel clocks the bracket tests map onto, with
// the vDSO clock that brackets them.
var kernelClocks = []struct {
	k  schedclock.KernelClock
	id vdso.ID
}{{schedclock.KernelMonotonic, vdso.Monotonic}, {schedclock.KernelBoottime, vdso.Boottime}}

// TestKernelTimeOnThePortableSourceIsExact: a clock on the portable
// source reads CLOCK_MONOTONIC itself (runtime.nanotime), so its
// readings map onto CLOCK_MONOTONIC and CLOCK_BOOTTIME exactly: every
// one inside its [clock_gettime, clock_gettime] bracket, and Info says
// so. 20,000 brackets a clock (a few ms); the qualification layer's
// bracket tests measure for seconds.
func TestKernelTimeOnThePortableSourceIsExact(t *testing.T) {
	skipEmulated(t)
	c, err := schedclock.New(schedclock.Portable())
	require.NoError(t, err)
	defer c.Close()
	for _, kc := range kernelClocks {
		_, ok := c.KernelTime(kc.k, c.Now())
		require.True(t, ok)
		r := countKernelBrackets(t, c, kc.k, kc.id, 20_000)
		t.Logf("%v: %v", kc.id, r)
		assert.Zero(t, r.outside, "%v: mapped exactly, yet outside (worst by %v)", kc.id, r.worst)
		// Info describes the map once the background has paired it
		// (a few ms after the first KernelTime); the wait's deadline
		// only ends a test that would hang.
		for deadline := time.Now().Add(10 * time.Second); ; runtime.Gosched() {
			_, rest, _ := strings.Cut(c.Info().KernelTime, kc.id.String()+": ")
			if strings.HasPrefix(rest, "exact") {
				break
			}
			require.True(t, time.Now().Before(deadline), "Info does not call the map exact: %s", c.Info().KernelTime)
		}
	}
	assert.Contains(t, c.Info().KernelTime, "CLOCK_MONOTONIC: exact: the clock reads CLOCK_MONOTONIC itself")
}

// skipEmulated skips a bracket test under qemu-user: its process has no
// vDSO time data (no [vvar]), so nothing is exact, and the kernel's clocks
// are the host's, read through system calls qemu translates (hundreds of
// µs each): the brackets would measure qemu, not the map. The map and
// the exact path are measured natively (make test runs them there).
func skipEmulated(t *testing.T) {
	if cpu.Emulated() {
		t.Skip("under an emulator: no vDSO time data, and clock_gettime's brackets are qemu's")
	}
}

// TestKernelTimeOfReadingsFromBeforeASwitch: readings a clock took on
// one counter, mapped after it switched to another (the default clock's
// set-up does so, from the portable source to the hardware's counter),
// map as exactly as they would have before the switch: each inside its
// [clock_gettime, clock_gettime] bracket.
func TestKernelTimeOfReadingsFromBeforeASwitch(t *testing.T) {
	skipEmulated(t)
	hw, err := schedclock.Paravirt()
	if err != nil {
		var errHw error
		if hw, errHw = schedclock.Hardware(); errHw != nil {
			t.Skipf("no counter the kernel converts to switch to: %v; %v", err, errHw)
		}
	}
	vc, err := vdso.Open(vdso.Monotonic)
	require.NoError(t, err)
	for round := range 3 {
		c, err := schedclock.New(schedclock.Portable())
		require.NoError(t, err)
		_, ok := c.KernelTime(schedclock.KernelMonotonic, c.Now())
		require.True(t, ok)
		type bracketed struct {
			a, b int64
			r    schedclock.Instant
		}
		readings := make([]bracketed, 20000)
		for i := range readings {
			a := vc.Now()
			r := c.Now()
			readings[i] = bracketed{a, vc.Now(), r}
		}
		require.NoError(t, c.Register(hw))
		outside, worst := 0, int64(0)
		for _, x := range readings {
			m, ok := c.KernelTime(schedclock.KernelMonotonic, x.r)
			require.True(t, ok)
			if out := max(x.a-m, m-x.b); out > 0 {
				outside++
				worst = max(worst, out)
			}
		}
		t.Logf("round %d: %d of %d readings from before the switch to %s outside their brackets (worst by %v); %s",
			round, outside, len(readings), hw.Name, time.Duration(worst), c.Info().KernelTime)
		assert.Zero(t, outside, "round %d: readings from before the switch, mapped after it, outside their brackets", round)
		c.Close()
	}
}
