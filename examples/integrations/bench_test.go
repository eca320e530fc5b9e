package integrations_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/schedclock/schedclock"
	"github.com/schedclock/schedclock/adapt"
	"github.com/schedclock/schedclock/examples/integrations"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/time/rate"
)

// The benchmarks compare, per operation, the standard way (clock=std:
// time.Now, time.Since, each library's default clock) with schedclock's
// (clock=schedclock), all in one run so that the ratios come from one
// machine state:
//
//	go test -run '^$' -bench . -count 10 . | tee bench.txt
//	benchstat -filter '-.name:Paired' -col /clock bench.txt
//	benchstat -filter '.name:Paired .unit:schedclock/std' bench.txt
//
// go test takes a benchmark's ten samples back to back, so on a shared
// machine a burst of load lands on one side of a comparison: a few
// percent (all a clock read can change in a log line) drowns. Paired
// runs each comparison interleaved, in blocks of pairedBlock operations
// alternating std and schedclock (ABBA), and reports each side's median
// time per operation and the median ratio of the pairs, per sample.
//
// TestMain waits, before benchmarking, for the default clock to leave
// Go's monotonic clock for the hardware counter (tens of ms after start
// where its rate must be measured) and prints what it runs on as a
// "schedclock-source:" line, which benchstat shows with goos and cpu.

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		schedclock.WallNow() // the first call takes the first wall pairing
		deadline := time.Now().Add(2 * time.Second)
		for schedclock.Default().Info().Source == "portable" && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		in := schedclock.Default().Info()
		fmt.Printf("schedclock-source: %s\n", in.Source)
		if in.Evidence.Rejected != "" {
			fmt.Printf("schedclock-rejected: %s\n", in.Evidence.Rejected)
		}
	}
	os.Exit(m.Run())
}

// workload is one operation done the standard way and schedclock's:
// the sub-benchmarks of Benchmark{group} are {name}/clock={clock}, and
// Paired/{group}/{name}/clock={clock} compares each clock with std.
type workload struct {
	group, name string
	clocks      []clocked // std first
}

type clocked struct {
	clock string
	run   func(n int) // n operations
}

var (
	sinkTime     time.Time
	sinkDuration time.Duration
	sinkBool     bool
)

func clockReads() []workload {
	return []workload{
		{"ClockRead", "op=Now", []clocked{
			{"std", func(n int) {
				for range n {
					sinkTime = time.Now()
				}
			}},
			{"schedclock", func(n int) {
				for range n {
					sinkTime = schedclock.WallNow()
				}
			}},
		}},
		{"ClockRead", "op=Since", []clocked{
			{"std", func(n int) {
				start := time.Now()
				for range n {
					sinkDuration = time.Since(start)
				}
			}},
			{"schedclock", func(n int) {
				start := schedclock.Now()
				for range n {
					sinkDuration = schedclock.Since(start)
				}
			}},
		}},
	}
}

// A zap production JSON line, to io.Discard.
func zapLines() []workload {
	logger := func(opts ...zap.Option) func(n int) {
		core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel)
		l := zap.New(core, opts...)
		return func(n int) {
			for range n {
				l.Info("request served", zap.String("path", "/api/v1/items"), zap.Int("status", 200))
			}
		}
	}
	return []workload{{"Zap", "", []clocked{
		{"std", logger()},
		{"schedclock", logger(zap.WithClock(adapt.Clock{}))},
	}}}
}

// A zerolog line with a timestamp, to io.Discard, in zerolog's default
// time format (RFC 3339, whole seconds) and in Unix nanoseconds. The
// clock is zerolog's global TimestampFunc, set before each block.
func zerologLines() []workload {
	var out []workload
	for _, format := range []struct{ name, layout string }{
		{"rfc3339", time.RFC3339},
		{"unixnano", zerolog.TimeFormatUnixNano},
	} {
		logger := func(now func() time.Time) func(n int) {
			l := zerolog.New(io.Discard).With().Timestamp().Logger()
			return func(n int) {
				zerolog.TimestampFunc, zerolog.TimeFieldFormat = now, format.layout
				for range n {
					l.Info().Str("path", "/api/v1/items").Int("status", 200).Msg("request served")
				}
			}
		}
		out = append(out, workload{"Zerolog", "format=" + format.name, []clocked{
			{"std", logger(time.Now)},
			{"schedclock", logger(schedclock.WallNow)},
		}})
	}
	return out
}

// A log/slog line to io.Discard, two ways. via=logger: slog.Logger.Info,
// with slog's own time (std) and re-stamped with WallNow by StampHandler
// (schedclock). via=record: the record built by hand, as slog.Logger
// does it, stamped with time.Now (std: logTimeNow) or WallNow
// (schedclock: LogWallNow), so that only the clock differs.
func slogLines() []workload {
	var out []workload
	for _, handler := range []struct {
		name string
		new  func() slog.Handler
	}{
		{"text", func() slog.Handler { return slog.NewTextHandler(io.Discard, nil) }},
		{"json", func() slog.Handler { return slog.NewJSONHandler(io.Discard, nil) }},
	} {
		logger := func(l *slog.Logger) func(n int) {
			return func(n int) {
				for range n {
					l.Info("request served", "path", "/api/v1/items", "status", 200)
				}
			}
		}
		record := func(log func(context.Context, slog.Handler, slog.Level, string, ...any)) func(n int) {
			h := handler.new()
			return func(n int) {
				for range n {
					log(context.Background(), h, slog.LevelInfo, "request served", "path", "/api/v1/items", "status", 200)
				}
			}
		}
		out = append(out,
			workload{"Slog", "handler=" + handler.name + "/via=logger", []clocked{
				{"std", logger(slog.New(handler.new()))},
				{"schedclock", logger(slog.New(integrations.StampHandler{Handler: handler.new()}))},
			}},
			workload{"Slog", "handler=" + handler.name + "/via=record", []clocked{
				{"std", record(logTimeNow)},
				{"schedclock", record(integrations.LogWallNow)},
			}})
	}
	return out
}

// logTimeNow is integrations.LogWallNow with time.Now in place of
// WallNow.
func logTimeNow(ctx context.Context, h slog.Handler, level slog.Level, msg string, args ...any) {
	if ctx == nil {
		ctx = context.Background()
	}
	if !h.Enabled(ctx, level) {
		return
	}
	var pcs [1]uintptr
	runtime.Callers(2, pcs[:])
	r := slog.NewRecord(time.Now(), level, msg, pcs[0])
	r.Add(args...)
	_ = h.Handle(ctx, r)
}

// One timed observation: a reading, then Observe of the seconds since;
// and the middleware around an empty handler, called directly.
func histograms() []workload {
	newHistogram := func() prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: "seconds", Buckets: prometheus.DefBuckets})
	}
	stdHist, schedHist := newHistogram(), newHistogram()
	serve := func(instrument func(http.Handler, prometheus.Observer) http.Handler) func(n int) {
		h := instrument(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), newHistogram())
		w, r := httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil)
		return func(n int) {
			for range n {
				h.ServeHTTP(w, r)
			}
		}
	}
	return []workload{
		{"Histogram", "", []clocked{
			{"std", func(n int) {
				for range n {
					start := time.Now()
					stdHist.Observe(time.Since(start).Seconds())
				}
			}},
			{"schedclock", func(n int) {
				for range n {
					start := schedclock.Now()
					schedHist.Observe(schedclock.Since(start).Seconds())
				}
			}},
		}},
		{"Middleware", "", []clocked{
			{"std", serve(integrations.InstrumentStd)},
			{"schedclock", serve(integrations.Instrument)},
		}},
	}
}

// One Allow of a token bucket that never runs dry: rate.Limiter's own
// Allow (time.Now), Limiter.Allow (schedclock.Now) and
// Limiter.AllowCoarse (schedclock.Coarse).
func limiters() []workload {
	const limit, burst = 1e12, 1 << 30
	std := rate.NewLimiter(limit, burst)
	sched := integrations.NewLimiter(schedclock.Default(), limit, burst)
	coarse := integrations.NewLimiter(schedclock.Default(), limit, burst)
	return []workload{{"Limiter", "", []clocked{
		{"std", func(n int) {
			for range n {
				sinkBool = std.Allow()
			}
		}},
		{"schedclock", func(n int) {
			for range n {
				sinkBool = sched.Allow()
			}
		}},
		{"schedclock-coarse", func(n int) {
			for range n {
				sinkBool = coarse.AllowCoarse()
			}
		}},
	}}}
}

// restoreZerolog puts zerolog's globals back after the benchmark.
func restoreZerolog(b *testing.B) {
	now, format := zerolog.TimestampFunc, zerolog.TimeFieldFormat
	b.Cleanup(func() { zerolog.TimestampFunc, zerolog.TimeFieldFormat = now, format })
}

// runEach runs each clock of each workload as a sub-benchmark of its own.
func runEach(b *testing.B, workloads []workload) {
	for _, w := range workloads {
		for _, c := range w.clocks {
			b.Run(join(w.name, "clock="+c.clock), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					c.run(1)
				}
			})
		}
	}
}

func BenchmarkClockRead(b *testing.B)  { runEach(b, clockReads()) }
func BenchmarkZap(b *testing.B)        { runEach(b, zapLines()) }
func BenchmarkZerolog(b *testing.B)    { restoreZerolog(b); runEach(b, zerologLines()) }
func BenchmarkSlog(b *testing.B)       { runEach(b, slogLines()) }
func BenchmarkHistogram(b *testing.B)  { runEach(b, histograms()[:1]) }
func BenchmarkMiddleware(b *testing.B) { runEach(b, histograms()[1:]) }
func BenchmarkLimiter(b *testing.B)    { runEach(b, limiters()) }
func BenchmarkPaired(b *testing.B)     { restoreZerolog(b); runPaired(b) }
func runPaired(b *testing.B) {
	var all []workload
	for _, ws := range [][]workload{clockReads(), zapLines(), zerologLines(), slogLines(), histograms(), limiters()} {
		all = append(all, ws...)
	}
	for _, w := range all {
		std := w.clocks[0]
		for _, c := range w.clocks[1:] {
			b.Run(join(w.group, w.name, "clock="+c.clock), func(b *testing.B) { paired(b, std.run, c.run) })
		}
	}
}

// pairedBlock is how many operations run between two clock readings in
// paired: enough that the readings cost under 1%, few enough that a
// block (3 to 100 µs here) is much shorter than a scheduler's time
// slice, so that a preemption spoils a few blocks, not a comparison.
const pairedBlock = 64

// paired runs std and sched in alternating blocks, std first in even
// pairs and sched first in odd ones. It reports the median time per
// operation of each side's blocks and the median of the pairs' ratios,
// sched/std: medians, so that the blocks another process or a GC
// interrupted (a few, long) do not weigh in.
func paired(b *testing.B, std, sched func(n int)) {
	var stdBlocks, schedBlocks, ratios []float64
	for i := 0; b.Loop(); i++ {
		first, second := std, sched
		if i%2 == 1 {
			first, second = sched, std
		}
		t0 := time.Now()
		first(pairedBlock)
		t1 := time.Now()
		second(pairedBlock)
		t2 := time.Now()
		s, c := float64(t1.Sub(t0)), float64(t2.Sub(t1))
		if i%2 == 1 {
			s, c = c, s
		}
		stdBlocks, schedBlocks, ratios = append(stdBlocks, s), append(schedBlocks, c), append(ratios, c/s)
	}
	stdNs, schedNs := median(stdBlocks)/pairedBlock, median(schedBlocks)/pairedBlock
	b.ReportMetric((stdNs+schedNs)/2, "ns/op") // both sides, per operation
	b.ReportMetric(stdNs, "std-ns/op")
	b.ReportMetric(schedNs, "schedclock-ns/op")
	b.ReportMetric(median(ratios), "schedclock/std")
}

func median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// join joins the non-empty parts of a benchmark name with slashes.
func join(parts ...string) string {
	var name string
	for _, p := range parts {
		if p != "" && name != "" {
			name += "/"
		}
		name += p
	}
	return name
}
