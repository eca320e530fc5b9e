package schedclock

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/kernel"
)

// hardwareExpected reports whether this machine offers a hardware counter
// the default clock should end up on.
func hardwareExpected(t *testing.T) (Source, bool) {
	hw, _, _, err := probeHardware()
	if err != nil {
		assert.True(t, runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" || errorsIsAny(err),
			"unexpected probe error: %v", err)
		return Source{}, false
	}
	// A counter whose probe has no kernel check of its own (the riscv64,
	// ppc64le, s390x and loong64 ones) is adopted only on the kernel's
	// word, which under qemu-user is the host's: not expected there.
	if d := chooseCounter(counterTable()).desc; d.Verdict != nil {
		if v := d.Verdict(); !v.Keep() {
			t.Logf("%s not expected: %v", hw.Name, v)
			return Source{}, false
		}
	}
	return hw, true
}

func errorsIsAny(err error) bool {
	return errors.Is(err, ErrUnsupported) || errors.Is(err, errUntrusted)
}

// TestAnIdleClockWakesRarely counts the background goroutine's wake-ups
// of a clock like the default clock on a hardware counter the kernel
// vouches for (a rate from a register, a reference, the kernel's verdict
// polled, Coarse and the wall map used once), in the 10 s that follow its
// first second, with nothing reading it. Each wake-up costs an idle
// process CPU (about 250 µs in a KVM guest, where a timer's wake-up is a
// cross-CPU interrupt), so the schedule must bunch its work: the watch
// folds the counter, and refinements and the verdict ride on the watch's
// ticks. It runs in a testing/synctest bubble, so the count is of the
// schedule, not of how fast this machine is: the counter, the reference
// and the witness all read the bubble's fake time.
func TestAnIdleClockWakesRarely(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		fake := func() int64 { return int64(time.Since(start)) }
		hw := Source{Name: "hw", Bits: 64, Rate: 2_100_000_000, Read: func() uint64 { return uint64(float64(fake()) * 2.1) }}
		tr := &tracker{ref: fake, witness: fake, src: hw, adopted: true, endsOnRegister: true}
		c, err := newClock(hw, rating{hz: 2.1e9, origin: rateCPUID, errPPM: 1}, tr)
		require.NoError(t, err)
		polls := 0
		c.st.policy = &trustPolicy{verdict: func() string { polls++; return "" }}
		c.start()
		defer c.Close()
		c.nanos()
		c.Coarse()
		c.WallTime(c.Now())
		bubbleSleep(time.Second)
		c.st.mu.Lock()
		before, pollsBefore := c.st.loop.wakes, polls
		c.unlock()
		bubbleSleep(10 * time.Second)
		c.st.mu.Lock()
		wakes, in := c.st.loop.wakes-before, c.infoLocked()
		polled := polls - pollsBefore
		c.unlock()
		t.Logf("%d wake-ups in 10 s idle (watch every %v at the end; %d verdict polls; rate %s ±%.3f ppm)",
			wakes, tr.watch.every, polled, in.RateOrigin, in.RateErrorPPM)
		// The watch: 400 ms, 800 ms, 1.6 s, then 2 s; folds, refinements
		// and verdicts on the same ticks.
		assert.LessOrEqual(t, wakes, 8, "wake-ups in 10 s idle")
		assert.Equal(t, maxWatchPeriod, tr.watch.every)
		assert.GreaterOrEqual(t, polled, 1, "the kernel's verdict is still polled (every %v, on the watch's ticks)", verdictPeriod)
		assert.Equal(t, rateRefined.String(), in.RateOrigin, "refinements still run")
		assert.Zero(t, in.Watch.Reanchors, in.Watch.LastReanchor)
		// Coarse's ticker and the wall map's refreshing stopped once
		// nothing read them.
		assert.False(t, c.st.ticker.running.Load(), "Coarse's ticker still runs")
		assert.True(t, c.st.wall.asleep.Load(), "the wall map is still refreshed every period")
	})
}

// TestTheFirstUseStartsTheSetUp: a default clock's first use (a Now)
// starts its set-up, in the background, with no second use to prompt
// it: a program that reads the clock once and asks Info later finds the
// choice made, not "portable" with the choice still pending. Until the
// choice, Info says what is pending.
func TestTheFirstUseStartsTheSetUp(t *testing.T) {
	hw := realtime1GHz()
	hw.Rate = 1e9
	probing, release := make(chan struct{}), make(chan struct{})
	c := newDefaultClock([]*descriptor{{Arch: runtime.GOARCH,
		Probe: func() (Source, rateOrigin, float64, error) {
			close(probing)
			<-release
			return hw, rateCPUID, 0, nil
		},
		NoVerdict: "no verdict: a test's counter",
	}})
	defer c.Close()
	c.Now()
	select {
	case <-probing:
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("the first Now started no set-up")
	}
	in := c.Info()
	assert.Equal(t, choicePending, in.Evidence.Pending, "Info while the choice runs")
	close(release)
	require.Eventually(t, func() bool {
		c.st.mu.Lock()
		defer c.st.mu.Unlock()
		return c.st.policy.chosen
	}, 10*time.Second, time.Millisecond, "the set-up never chose")
	in = c.Info()
	assert.Equal(t, "hw", in.Source)
	assert.Empty(t, in.Evidence.Pending)
}

// TestInfoIsAFirstUse: a default clock whose first use is an Info
// starts its set-up; and one whose snapshot a writer replaced before any
// set-up (a Register inside a testing/synctest bubble, where no set-up
// starts) answers Info with that snapshot, not the boot one.
func TestInfoIsAFirstUse(t *testing.T) {
	probing := make(chan struct{})
	c := newDefaultClock([]*descriptor{{Arch: runtime.GOARCH, Probe: func() (Source, rateOrigin, float64, error) {
		close(probing)
		return Source{}, 0, 0, ErrUnsupported
	}}})
	defer c.Close()
	c.Info()
	select {
	case <-probing:
	case <-time.After(5 * time.Second):
		t.Fatal("the first use, an Info, started no set-up")
	}

	synctest.Test(t, func(t *testing.T) {
		c := newDefaultClock(nil)
		defer c.Close()
		m, err := newManual(1e9, 64)
		require.NoError(t, err)
		require.NoError(t, c.Register(m.Source()))
		require.False(t, c.st.policy.started(), "a set-up started inside a bubble")
		assert.Equal(t, "manual", c.Info().Source)
	})
}

// newChosenDefaultClock is newDefaultClock with its hardware choice made
// at once, as the set-up makes it at the first use: what a test of the
// choice looks at. Its background work starts at its first use.
func newChosenDefaultClock(table []*descriptor) *Clock {
	c := newDefaultClock(table)
	c.chooseHardware()
	return c
}

// TestCloseDuringTheHardwareChoice: a default clock closed while its
// set-up chooses the hardware ends its background goroutine once the
// choice is made, though the set-up's helper took Close's kick: the loop
// looks at stop before it waits, and its next look after a closed
// clock's tick is an hour away.
func TestCloseDuringTheHardwareChoice(t *testing.T) {
	probing, release := make(chan struct{}), make(chan struct{})
	c := newDefaultClock([]*descriptor{{Arch: runtime.GOARCH, Probe: func() (Source, rateOrigin, float64, error) {
		close(probing)
		<-release
		return Source{}, 0, 0, ErrUnsupported
	}}})
	c.st.policy.startSetUp()
	<-probing
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	require.Eventually(t, c.st.loop.stopping, 10*time.Second, time.Millisecond, "Close never closed stop")
	close(release)
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(time.Hour / 360): // a loaded machine delays the end by milliseconds, not seconds
		t.Fatal("Close waits for the background goroutine's next look, an hour away")
	}
}

// TestPortableConversion: the default clock's conversion, written out for
// package initialisation, is the one newConversion derives.
func TestPortableConversion(t *testing.T) {
	conv, err := newConversion(Portable())
	require.NoError(t, err)
	assert.Equal(t, conv, portableConversion)
}

// TestBootLine: the first line bootDefaultClock stores into bank 0
// directly is the bank a publication of it writes, with seq still 0,
// the fast path's reach (portableFastMax) included, and it is the line
// the writer and the line log start from.
func TestBootLine(t *testing.T) {
	c := newDefaultClock(nil)
	require.Zero(t, c.latch.seq.Load(), "the boot publishes nothing: readers read bank 0")
	var want bank
	want.store(&c.st.cur, noStep)
	got := &c.latch.banks[0]
	assert.Equal(t, want.read, got.read, "read")
	assert.Equal(t, want.epochCyc.Load(), got.epochCyc.Load(), "epochCyc")
	assert.Equal(t, want.epochNs.Load(), got.epochNs.Load(), "epochNs")
	assert.Equal(t, want.fastMax.Load(), got.fastMax.Load(), "fastMax")
	assert.Equal(t, want.base.Load(), got.base.Load(), "base")
	assert.Equal(t, want.scale.Load(), got.scale.Load(), "scale")
	assert.Equal(t, want.offset.Load(), got.offset.Load(), "offset")
	live, cur := c.st.lines.live, c.st.cur
	assert.Equal(t, funcPtr(cur.read), funcPtr(live.read), "the line log starts at the boot line")
	live.read, cur.read = nil, nil
	assert.Equal(t, cur, live, "the line log starts at the boot line")
	assert.Equal(t, funcPtr(c.st.src.Read), got.read, "the bank reads the writer's source")
	first, second := c.Now(), c.Now()
	assert.LessOrEqual(t, first, second)
}

// TestBootInfo: bootInfo, the snapshot a default clock starts with, is
// what infoLocked says of the clock then, and what Info returns while a
// writer holds the lock.
func TestBootInfo(t *testing.T) {
	c := newDefaultClock(nil)
	defer c.Close()
	c.st.mu.Lock()
	held := c.Info() // the snapshot: the lock is taken
	fresh := c.infoLocked()
	stored := c.st.info.Load() // before the background work Info began may store another
	c.st.mu.Unlock()
	assert.Equal(t, fresh, held)
	assert.Same(t, &bootInfo, stored)
	assert.Empty(t, bootInfo.KernelTime, "Info fills it in")
}

// TestDefaultClockConvertsAsTheKernelDoes: where the kernel runs on the
// counter the default clock chooses, in the vDSO clock mode its
// descriptor names, the clock converts with the kernel's own raw
// conversion: Info shows its mult and shift, the rate they make and
// origin "kernel", and no refinement changes them, not even the sliding
// ones after the schedule (a same-counter switch, which stands Now
// still). Where the kernel runs on another counter, or its conversion
// cannot be read, the descriptor's rate stands, and is refined as ever.
func TestDefaultClockConvertsAsTheKernelDoes(t *testing.T) {
	const mult, shift = 1<<24 + 3, 24 // a kernel's rounding of 1 GHz
	for _, c := range []struct {
		name, clocksource string
		readErr           error
		kernel            bool
	}{
		{"the kernel runs on it", "tsc", nil, true},
		{"the kernel runs on another", "hpet", nil, false},
		{"no conversion to read", "tsc", errors.New("no vDSO time data in this process"), false},
	} {
		kernelFile := filepath.Join(t.TempDir(), "current_clocksource")
		require.NoError(t, os.WriteFile(kernelFile, []byte(c.clocksource+"\n"), 0o644))
		hw := realtime1GHz()
		hw.Rate = 1e9
		clock := newDefaultClock([]*descriptor{{
			Arch: runtime.GOARCH, VDSOMode: vdsoModeTSC,
			Probe: func() (Source, rateOrigin, float64, error) {
				return hw, rateCPUID, 0, nil
			},
			Verdict: func() kernel.Verdict { return kernel.ReadVerdict(kernelFile, "tsc") },
		}})
		var asked []int32
		clock.st.policy.readKernelConv = func(mode int32, read func() uint64) (kernelConv, error) {
			asked = append(asked, mode)
			require.Equal(t, funcPtr(hw.Read), funcPtr(read), "%s: the counter read is the one chosen", c.name)
			return kernelConv{conv: conversion{mult: mult, shift: shift, mask: ^uint64(0)}, hz: math.Ldexp(1e9, shift) / mult}, c.readErr
		}
		clock.chooseHardware()
		in := clock.Info()
		if !c.kernel {
			if c.clocksource == "tsc" {
				assert.Equal(t, "hw", in.Source, c.name)
				assert.Equal(t, []int32{vdsoModeTSC}, asked, c.name)
			} else {
				assert.Empty(t, asked, "%s: the kernel's conversion is of another counter", c.name)
			}
			assert.NotEqual(t, rateKernel.String(), in.RateOrigin, c.name)
			require.NoError(t, clock.Close())
			continue
		}
		assert.Equal(t, []int32{vdsoModeTSC}, asked, c.name)
		assert.Equal(t, "hw", in.Source, c.name)
		assert.Equal(t, rateKernel.String(), in.RateOrigin, c.name)
		assert.Equal(t, uint32(mult), in.Mult, c.name)
		assert.Equal(t, uint32(shift), in.Shift, c.name)
		assert.Equal(t, uint64(math.Round(math.Ldexp(1e9, shift)/mult)), in.Rate, c.name)
		assert.Zero(t, in.RateErrorPPM, c.name)
		assert.Zero(t, in.ConversionErrorPPM, c.name)

		// A refinement after the schedule, which would otherwise always
		// switch to the rate it measured.
		clock.st.mu.Lock()
		tr := clock.st.track
		require.NotNil(t, tr)
		tr.startLocked(time.Now(), &clock.st.cur)
		tr.cal.step, tr.cal.history = len(calibrationSchedule), []ratePoint{tr.cal.baseline}
		time.Sleep(2 * time.Millisecond)
		v := clock.viewLocked()
		d := tr.refine(time.Now(), &v, tr.point(v.cur))
		clock.unlock()
		assert.Nil(t, d.rerate, "%s: the kernel's conversion refined", c.name)
		require.NoError(t, clock.Close())
	}
}
