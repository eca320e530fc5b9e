package schedclock

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/cpu"
	"github.com/schedclock/schedclock/internal/osthread"
	"github.com/schedclock/schedclock/internal/race"
	"github.com/schedclock/schedclock/internal/testutil/pprofdecode"
)

// A cross-cutting suite: the seed's NMI test, in Go. It proves, under SIGPROF on every thread, the
// seqcount latch's protocol (latch.go), the readers (now.go,
// now_amd64.{go,s}, now_other.go), the writer's paths that publish
// (Update in schedclock.go, Register and the freezer in switch.go,
// Suspend and Resume in suspend.go), on the portable source (source.go),
// a fake counter, the default clock (default.go) and the hardware counter
// (source_tsc.go, source_cntvct.go). Its oracle, and the oracle's own
// tests, are in stress_check_test.go.
//
// In the kernel the danger is an NMI that interrupts the writer half-way
// through an update and reads the clock on the same CPU. Here readers run
// on every P (max(2, GOMAXPROCS) goroutines, at GOMAXPROCS=1 and at
// NumCPU), a writer publishes back to back, tens of kHz of lines (Update
// mostly, a Register of a same-rate source, a rate refinement, Suspend
// and Resume), pausing inside its steps at random, and SIGPROF floods
// every reader's and the writer's thread: CPU profiling runs at 10 kHz,
// and since the kernel fires the profiler's CPU-time timers only at its
// ticks, a monotonic timer of each thread's own sends it SIGPROF at
// 10 kHz too (on Linux). Readers and the writer are so
// interrupted at arbitrary instructions: the writer half-way through its
// steps, with readers running on its P at GOMAXPROCS=1.
//
// Every reading is checked three ways:
//
//   - it is not below the reader's own previous reading;
//   - it is not below a shared high-water mark loaded before the call
//     (happens-before order across goroutines; the mark is raised with a
//     CAS-max after every reading that is not torn);
//   - it is not torn: some line the writer published explains it. The
//     writer's step hook records every line before readers can see it; a
//     reader reads each counter the lines use before and after its Now,
//     and loads the number of recorded lines before and after. The
//     reading must lie within [line(counter before), line(counter after)]
//     for one of the lines that can have been current during the call,
//     equal the value of a suspended line, or equal the value a freezer
//     line was pinned at (readings of a freezer the writer had not pinned
//     yet are checked at the end). A value read from a mix of two lines'
//     fields lands outside every bracket by the distance between the
//     lines' epochs (microseconds here); the check cannot see a value off
//     by less than the bracket, the time between the two counter reads
//     (some tens of nanoseconds).
//
// The count of readings is fixed, not the time: on a loaded machine the
// test takes longer, it does not check less.
//
// What a machine can show: the Go reader (portable, fake, and the default
// clock where it runs on the portable source) on every CPU at once,
// wherever the writer stops. The hardware counter's assembly reader runs
// on every CPU only where the kernel trusts the counter; where it does not
// (the 2-vCPU AMD EPYC KVM guest this was written on: tsc=unstable, and
// its vCPUs' TSCs are not in step) readers and writer share one CPU, so
// a reader is only ever interrupted, never overlapped, by the writer, and
// a missing re-check or fence in clockNow (now_amd64.s) cannot show there: a reader
// would have to be interrupted between two of its field loads, a window
// of a few instructions. Nor can the ordering of the counter read itself
// (LFENCE, ISB) show in a check that brackets readings by counter reads
// on the same thread; and under qemu-aarch64 nothing about arm64's memory
// ordering shows at all.

// stressEnv names the environment variable that sets how many readings
// TestStressNowUnderSIGPROF takes in all, split evenly over its runs (one
// clock at one GOMAXPROCS).
const stressEnv = "SCHEDCLOCK_STRESS_READS"

// stressDefaultReads is the readings TestStressNowUnderSIGPROF takes when
// stressEnv is unset. Under the race detector, which makes every atomic
// operation some ten times slower and is there to see the protocol rather
// than to count, it takes a hundredth of it; so it does under user-mode
// emulation (make test-arm64: qemu-aarch64 on an x86 host), where a
// reading is some 50 times slower and a signal slower still, and which can
// show that the arm64 reader runs the protocol, not how the hardware
// orders it.
const stressDefaultReads = 10_000_000

// stressProfileHz is how often each thread is interrupted by SIGPROF.
const stressProfileHz = 10_000

// stressTotalReads returns the readings TestStressNowUnderSIGPROF takes.
func stressTotalReads(t *testing.T) int {
	if s := os.Getenv(stressEnv); s != "" {
		n, err := strconv.ParseFloat(s, 64) // 1e9 is accepted
		require.NoError(t, err, "%s=%q", stressEnv, s)
		require.True(t, n >= 1 && n <= math.MaxInt64/2, "%s=%q", stressEnv, s)
		return int(n)
	}
	if race.Enabled || cpu.Emulated() {
		return stressDefaultReads / 100
	}
	return stressDefaultReads
}

// stressCase is one clock under stress.
type stressCase struct {
	name  string
	clock *Clock
	// counters lists every counter the clock's lines read (by the same
	// func value as in their Source): each is read before and after
	// every Now to bracket it.
	counters []func() uint64
	// writes are the writer's operations, taken in turn.
	writes []func()
	// cpu, if not negative, is the CPU every reader and the writer are
	// pinned to: for a counter that is not in step across CPUs.
	cpu int
	// sigprofHz, if not 0, is how often a timer of its own sends SIGPROF
	// to each reader's and the writer's thread.
	sigprofHz int
}

// stressResult sums the readers.
type stressResult struct {
	stressReader
	publications uint64
	writerOps    int
	readers      int
	elapsed      time.Duration
}

// stressRun runs sc's readers and writer until the readers have taken
// reads readings between them. now reads the clock (sc.clock.Now unless a
// test of the checker itself gives a broken one).
func stressRun(t *testing.T, sc stressCase, now func() int64, reads int) stressResult {
	t.Helper()
	lg := newStressLog(sc.counters)
	detach := lg.attach(sc.clock)
	defer detach()

	// At least two readers, so that happens-before order across
	// goroutines is checked at GOMAXPROCS=1 too.
	readers := max(2, runtime.GOMAXPROCS(0))
	// Every reader and the writer is locked to a thread of its own (never
	// unlocked: the thread exits with the goroutine), pinned to sc.cpu if
	// asked, and sent SIGPROF at sc.sigprofHz by a timer of its own.
	var signalErr atomic.Pointer[error]
	enter := func() (leave func()) {
		runtime.LockOSThread()
		unpin := func() {}
		if sc.cpu >= 0 {
			var err error
			if unpin, err = stressPinThread(sc.cpu); err != nil {
				panic(err)
			}
		}
		if sc.sigprofHz == 0 {
			return unpin
		}
		stop, err := osthread.SignalProf(sc.sigprofHz)
		if err != nil {
			signalErr.Store(&err)
			return unpin
		}
		return func() { stop(); unpin() }
	}

	var (
		mark    atomic.Int64
		done    atomic.Bool
		writing atomic.Bool
		writer  sync.WaitGroup
		readWG  sync.WaitGroup
		results = make([]stressReader, readers)
		ops     int
	)
	mark.Store(math.MinInt64)
	start := time.Now()
	writer.Add(1)
	started := make(chan struct{})
	go func() {
		defer writer.Done()
		defer enter()()
		// Back to back: the step hook makes each publication last some
		// microseconds, so that preemption, SIGPROF and the OS stop the
		// writer inside its steps rather than between them.
		for ; !done.Load(); ops++ {
			writing.Store(true)
			sc.writes[ops%len(sc.writes)]()
			writing.Store(false)
			if ops == 0 {
				close(started)
			}
		}
	}()
	// The readers start once the writer is running: at GOMAXPROCS=1, when
	// it has been preempted, most likely inside an operation.
	<-started
	for i := range results {
		readWG.Add(1)
		go func(rd *stressReader, n int) {
			defer readWG.Done()
			defer enter()()
			var before, after [4]uint64
			counters := sc.counters
			prev := int64(math.MinInt64)
			for ; rd.reads < n; rd.reads++ {
				n0 := lg.count.Load()
				if writing.Load() {
					rd.midWrite++
				}
				if sc.clock.latch.seq.Load()%2 == 1 {
					rd.oddSeq++
				}
				floor := mark.Load()
				for k, read := range counters {
					before[k] = read()
				}
				r := now()
				for k := len(counters) - 1; k >= 0; k-- {
					after[k] = counters[k]()
				}
				n1 := lg.count.Load()
				if n1 != n0 {
					rd.straddled++
				}
				if r < prev {
					rd.ownBack++
					rd.deepest = max(rd.deepest, prev-r)
					rd.note("reading %d after this reader's %d", r, prev)
				}
				if r < floor {
					rd.hbBack++
					rd.deepest = max(rd.deepest, floor-r)
					rd.note("reading %d below the mark %d loaded before the call", r, floor)
				}
				prev = r
				// A torn reading does not raise the mark: one value far
				// ahead would make every later reading an inversion.
				if lg.check(rd, r, n0, n1, before[:len(counters)], after[:len(counters)]) {
					for cur := mark.Load(); r > cur && !mark.CompareAndSwap(cur, r); cur = mark.Load() {
					}
				}
				if rd.reads%4096 == 0 && len(rd.pending) > 0 {
					rd.resolve(false)
				}
			}
		}(&results[i], (reads+readers-1)/readers)
	}
	readWG.Wait()
	done.Store(true)
	writer.Wait()
	sc.clock.Resume() // the writer may have stopped after a Suspend

	res := stressResult{publications: lg.count.Load() - 1, writerOps: ops, readers: readers, elapsed: time.Since(start)}
	for i := range results {
		rd := &results[i]
		rd.resolve(true)
		res.reads += rd.reads
		res.straddled += rd.straddled
		res.midWrite += rd.midWrite
		res.oddSeq += rd.oddSeq
		res.frozen += rd.frozen
		res.ownBack += rd.ownBack
		res.hbBack += rd.hbBack
		res.deepest = max(res.deepest, rd.deepest)
		res.torn += rd.torn
		res.unverified += rd.unverified
		res.examples = append(res.examples, rd.examples...)
	}
	assert.False(t, lg.confused.Load(), "%s: the step hook saw a pin with no freezer line before it", sc.name)
	if err := signalErr.Load(); err != nil {
		t.Logf("%s: only the profiler's own SIGPROFs: %v", sc.name, *err)
	}
	return res
}

// assertClean checks that a run saw no inversion, no torn value, and that
// it did what it set out to do.
func (res stressResult) assertClean(t *testing.T, name string, reads int) {
	t.Helper()
	t.Logf("%s: %d readings (%.2f M/s) by %d goroutines at GOMAXPROCS=%d in %v; %d publications (%.0f Hz) from %d writer operations; "+
		"readings begun with the writer inside an operation %d, in the middle of a publication (seq odd) %d; readings of a freezer %d; "+
		"readings a publication straddled %d; inversions %d (own) %d (happens-before), torn %d",
		name, res.reads, float64(res.reads)/res.elapsed.Seconds()/1e6, res.readers, runtime.GOMAXPROCS(0), res.elapsed.Round(time.Millisecond),
		res.publications, float64(res.publications)/res.elapsed.Seconds(), res.writerOps,
		res.midWrite, res.oddSeq, res.frozen, res.straddled, res.ownBack, res.hbBack, res.torn)
	assert.GreaterOrEqual(t, res.reads, reads, "%s: readings", name)
	if len(res.examples) > 0 {
		t.Logf("%s: first failures seen by each reader:\n\t%s", name, strings.Join(res.examples, "\n\t"))
	}
	assert.Zero(t, res.ownBack, "%s: readings below the reader's previous one (deepest %d ns)", name, res.deepest)
	assert.Zero(t, res.hbBack, "%s: readings below the happens-before mark (deepest %d ns)", name, res.deepest)
	assert.Zero(t, res.torn, "%s: torn readings", name)
	assert.Zero(t, res.unverified, "%s: readings whose lines left the ring before they were checked", name)
	// The writer ran among the readers, and was stopped inside its
	// operations while they read. (Lines published during a reading are
	// logged, not required: at GOMAXPROCS=1 a reader is rarely preempted
	// inside its few hundred nanoseconds.)
	if res.reads >= 1_000_000 {
		assert.Positive(t, res.midWrite, "%s: no reading began with the writer inside an operation", name)
	} else if res.midWrite == 0 {
		// Under -race or qemu the run is a hundredth as long, and at
		// GOMAXPROCS=1 the writer may never be caught mid-operation.
		t.Logf("%s: no reading began with the writer inside an operation (%d readings)", name, res.reads)
	}
	if res.reads >= 1_000_000 {
		assert.Greater(t, res.publications, uint64(16), "%s: publications", name)
	} else {
		assert.Positive(t, res.publications, "%s: publications", name)
	}
}

// stressProfile floods every thread with SIGPROF until the returned
// function is called, which returns how many samples (signals handled by
// the profiler) the profile holds, or -1 if another profile was running.
//
// The kernel decides how many signals arrive: a thread's CPU-time timer
// expires at a scheduler tick, so at most about CONFIG_HZ signals a
// second reach each busy thread, whatever rate is asked for (on this
// project's KVM guest, some 100 per thread and second).
func stressProfile(t *testing.T) (stop func() int64) {
	// The rate must be set before StartCPUProfile, which then keeps it
	// (and has the runtime print that it cannot set the rate it asks for).
	runtime.SetCPUProfileRate(stressProfileHz)
	var profile bytes.Buffer
	if err := pprof.StartCPUProfile(&profile); err != nil {
		// A profile is already running (go test -cpuprofile): its
		// SIGPROFs, at its own rate, are the flood.
		runtime.SetCPUProfileRate(0)
		t.Logf("CPU profiling already running (%v): SIGPROF at its rate", err)
		return func() int64 { return -1 }
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			pprof.StopCPUProfile()
		}
	})
	return func() int64 {
		pprof.StopCPUProfile()
		stopped = true
		samples, err := pprofdecode.Samples(profile.Bytes())
		require.NoError(t, err)
		return samples
	}
}

// stressCases returns the clocks to stress.
func stressCases(t *testing.T) []stressCase {
	var cases []stressCase

	// The default clock: on the hardware counter where this machine has a
	// trusted one, else on the portable source. A Register would end its
	// calibration for the rest of the test binary, so the writer only
	// updates, suspends and resumes it.
	def := Default()
	// Until its set-up has started, the default clock reads Go's
	// monotonic clock through readDefaultFirstUse (firstuse.go): the
	// same counter, read the same way.
	defCounters := []func() uint64{readMono, readDefaultFirstUse}
	if hw, _, _, err := probeHardware(); err == nil {
		defCounters = append(defCounters, hw.Read)
	}
	cases = append(cases, stressCase{name: "default", clock: def, counters: defCounters, cpu: -1,
		writes: stressWrites(def, nil)})

	// New(Portable()), Registered again (the same counter at the same
	// rate: anchored at the pinned value).
	p, err := New(Portable())
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	cases = append(cases, stressCase{name: "portable", clock: p, counters: []func() uint64{readMono}, cpu: -1,
		writes: stressWrites(p, func() {
			if err := p.Register(Portable()); err != nil {
				panic(err)
			}
		})})

	// Fake counters on one true time, Go's monotonic clock: a 32-bit and
	// a 64-bit counter at 24 MHz (mult is not exact there), starting far
	// apart. The writer switches between them (two different counters:
	// related by bracketed reads), and after each switch refines the rate
	// (the same counter: anchored at the pinned value), alternately to
	// 1 Hz less and back.
	narrow := Source{Name: "fake32", Bits: 32, Rate: 24_000_000, Read: func() uint64 {
		return readMono() * 24 / 1000 & maskOf(32)
	}}
	wide := Source{Name: "fake64", Bits: 64, Rate: 24_000_000, Read: func() uint64 {
		return readMono()*24/1000 + 1<<40
	}}
	f, err := New(narrow)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	sources := []Source{wide, narrow}
	switches := 0
	cases = append(cases, stressCase{name: "fake", clock: f, counters: []func() uint64{narrow.Read, wide.Read}, cpu: -1,
		writes: stressWrites(f, func() {
			switches++
			if err := f.Register(sources[switches%2]); err != nil {
				panic(err)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			// Only down, or the next Register would be refused as slower.
			refined := f.src
			refined.Rate = 24_000_000 - uint64(switches%2)
			conv, err := newConversion(refined)
			if err == nil {
				err = f.switchLocked(refined, conv, rating{hz: float64(refined.Rate), origin: rateRefined})
			}
			if err != nil {
				panic(err)
			}
		})})

	// The hardware counter through its assembly reader, while the writer
	// publishes. Where the counter is trusted (in step across CPUs),
	// readers and the writer run on every CPU. Where it is not (the
	// kernel left the TSC, as on this project's 2-vCPU KVM guest with
	// tsc=unstable), only readings on one CPU can be compared: readers
	// and writer are all pinned to one, and the clock has no background
	// goroutine, so nothing publishes from another CPU.
	if hw, cpu, ok := stressHardware(t); ok {
		c, err := newClock(hw, rating{hz: float64(hw.Rate), origin: rateMeasured}, nil)
		require.NoError(t, err)
		name := hw.Name
		if cpu >= 0 {
			name += fmt.Sprintf(" pinned to CPU %d", cpu)
		}
		cases = append(cases, stressCase{name: name, clock: c, counters: []func() uint64{hw.Read}, cpu: cpu,
			writes: stressWrites(c, func() {
				if err := c.Register(hw); err != nil {
					panic(err)
				}
			})})
	}
	return cases
}

// stressWrites returns the writer's operations: mostly Update, then
// register (if not nil), Suspend and Resume.
func stressWrites(c *Clock, register func()) []func() {
	writes := []func(){}
	for range 12 {
		writes = append(writes, func() { _ = c.Update() })
	}
	if register != nil {
		writes = append(writes, register)
	}
	return append(writes, func() { _ = c.Suspend() }, func() { _ = c.Update() }, func() { _ = c.Resume() })
}

// stressCPU returns the first CPU this process may run on.
func stressCPU(t *testing.T) int {
	cpus, err := osthread.CPUs()
	require.NoError(t, err)
	require.NotEmpty(t, cpus, "no CPU in this process's affinity mask")
	return cpus[0]
}

// stressPinThread binds the calling thread (the goroutine must be locked
// to it) to one CPU, and returns how to give the thread its mask back.
// The goroutine must call it before it exits: a locked goroutine's thread
// exits with it, except the main thread, which the runtime keeps, and a
// pinned main thread would pin every goroutine later scheduled on it.
func stressPinThread(cpu int) (restore func(), err error) {
	restoreMask, err := osthread.Pin(cpu)
	if err != nil {
		return nil, err
	}
	return func() { _ = restoreMask() }, nil
}

// stressHardware returns this build's hardware counter, at a rate
// measured on one CPU, and the CPU its readers must be pinned to (-1 where
// it is trusted to be in step across CPUs), or false (and why, in the
// log) where there is none to run.
func stressHardware(t *testing.T) (Source, int, bool) {
	var read func() uint64
	name := ""
	switch {
	case tscSupported:
		read, name = tscReader(), "tsc"
	case cntvctSupported:
		read, name = cntvctReader(), "cntvct"
	default:
		t.Logf("no hardware counter case: this build has no counter assembly (%s; %s)", tscUnsupportedReason(), cntvctUnsupportedReason())
		return Source{}, 0, false
	}
	cpu := -1
	if _, _, _, err := probeHardware(); err != nil {
		if !osthread.Supported {
			t.Logf("no %s case: %v, and threads cannot be pinned to one CPU on %s", name, err, runtime.GOOS)
			return Source{}, 0, false
		}
		cpu = stressCPU(t)
		t.Logf("%s case pinned to CPU %d: %v", name, cpu, err)
	}
	src := Source{Name: name, Read: read, Bits: 64}
	if name == "cntvct" {
		src.Bits, src.Rate = cntvctBits, cntfrq()&0xffff_ffff
		return src, cpu, src.Rate != 0
	}
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		var err error
		if cpu >= 0 {
			var unpin func()
			if unpin, err = stressPinThread(cpu); err == nil {
				defer unpin()
			}
		}
		if err == nil {
			var hz float64
			hz, _, err = measureRate(read, 20*time.Millisecond)
			src.Rate = uint64(hz)
		}
		done <- err
	}()
	require.NoError(t, <-done)
	return src, cpu, true
}

func TestStressNowUnderSIGPROF(t *testing.T) {
	total := stressTotalReads(t)
	threadHz := stressProfileHz
	if race.Enabled || cpu.Emulated() {
		// Each signal's handler is many times slower too.
		threadHz /= 10
	}
	if cpu.Emulated() {
		t.Logf("under user-mode emulation (the host's /proc/cpuinfo shows through): %d readings, SIGPROF at %d Hz", total, threadHz)
	}
	stopProfile := stressProfile(t)
	start := time.Now()
	cases := stressCases(t)
	procs := []int{1, runtime.NumCPU()}
	reads := (total + len(procs)*len(cases) - 1) / (len(procs) * len(cases))
	for _, p := range procs {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", p), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(p))
			for _, sc := range cases {
				sc.sigprofHz = threadHz
				t.Run(sc.name, func(t *testing.T) {
					stressRun(t, sc, sc.clock.nanos, reads).assertClean(t, sc.name, reads)
				})
			}
		})
	}
	if samples := stopProfile(); samples >= 0 {
		elapsed := time.Since(start)
		t.Logf("SIGPROF: %d profile samples in %v (%.0f a second; the profiler at %d Hz and a timer at %d Hz on each reader's and the writer's thread)",
			samples, elapsed.Round(time.Millisecond), float64(samples)/elapsed.Seconds(), stressProfileHz, threadHz)
		assert.Positive(t, samples, "no SIGPROF reached the profiler")
	}
}
