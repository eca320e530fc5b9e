// Package integrations is schedclock in the code it is meant for, a few
// lines each to copy: zap and zerolog timestamps, a Prometheus histogram
// of request durations in net/http middleware, a golang.org/x/time/rate
// limiter that tests drive by hand, a cache written against Kubernetes'
// clock.PassiveClock, and what to do about log/slog (nothing). It is a module of its own so that its examples and tests
// build against the real libraries while schedclock's go.mod keeps only
// x/sys and testify.
//
// # What to call
//
// Durations: start := schedclock.Now(), then schedclock.Since(start), a
// time.Duration that is never negative. A Prometheus Observer takes
// float64 seconds; Instrument is this as net/http middleware:
//
//	start := schedclock.Now()
//	next.ServeHTTP(w, r)
//	latency.Observe(schedclock.Since(start).Seconds())
//
// zap: give the logger schedclock/adapt's Clock, whose Now is
// schedclock.WallNow (zap.go):
//
//	logger := zap.New(core, zap.WithClock(adapt.Clock{}))
//
// Kubernetes: adapt.Clock is a k8s.io/utils/clock.PassiveClock (Now,
// Since); TTLCache is a consumer of one (k8s.go).
//
// zerolog: set its package-level clock once, at start-up (and a time
// format finer than zerolog's default RFC 3339, which keeps whole
// seconds, if the stamps are to show it):
//
//	zerolog.TimestampFunc = schedclock.WallNow
//
// log/slog: keep slog's own time. slog.Logger calls time.Now for every
// record before its Handler sees it, so a Handler that re-stamps records
// with WallNow (StampHandler, on an adapt.Clock) adds a clock read to every line and saves
// none. Where records must carry the counter's wall time, LogWallNow
// builds them itself, with one clock read.
//
// Deadlines, caches, rate limits: schedclock.Coarse(), a few loads of a
// value kept current every 1 ms (on Linux, at least at every kernel tick). Limiter puts a rate.Limiter on a
// schedclock.Clock so that tests refill it exactly with a
// schedclocktest.Manual counter.
//
// # What it saves, and when to prefer time.Now
//
// Measured on one machine (the table and the command are in README.md
// beside this file; linux/amd64, the kernel on the TSC, the default clock
// on the TSC): WallNow costs 0.63x time.Now, schedclock.Since 0.75x
// time.Since. In a log line that is little: a zap line 2% faster, a
// zerolog line 8-9% faster (zerolog's line is short, 300 ns here), a
// slog line 5-7% slower with StampHandler and 1-2% faster with
// LogWallNow. A timed histogram observation costs 0.71x, a rate.Limiter
// Allow 0.84x on Now and 0.57x on Coarse.
//
// Prefer time.Now when the thing around the clock read costs far more
// than the read (a log line with many fields, a request that takes
// microseconds: the saving is tens of nanoseconds); when the value must
// carry a monotonic reading (a time.Time to subtract or hand to timers:
// WallNow's has none); and where the default clock runs on Go's
// monotonic clock (Info().Source is "portable": a kernel on another
// clocksource, such as a VM on kvm-clock), where Now costs about 1.1x
// time.Since (schedclock's docs/benchmarks.md) and the gains above shrink.
//
// # How it works
//
// On Linux, time.Now reads two clocks through the vDSO (CLOCK_REALTIME
// and CLOCK_MONOTONIC); WallNow reads the counter once and maps it to
// wall time through a line that schedclock aims at time.Now every
// 100 ms, so it stays within about 100 µs of time.Now and never
// decreases except across a step of the wall clock. It is not always
// inside a time.Now bracket: the tests here see a few stamps in 20,000
// outside one, by under a microsecond. Since
// reads the counter once, as time.Since reads CLOCK_MONOTONIC once.
package integrations
