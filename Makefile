# schedclock: make test is the README's test command and CI's gate (see
# docs/development.md for how long each target takes); make qualify runs
# its qualification layer alone; make test-full adds the rest of the
# matrix. .ci/run runs both.
GO        ?= go
QEMU      ?= qemu-aarch64
# The other 64-bit Linux ports, each under its own user-mode qemu
# (GOARCH:emulator): make test-riscv64, test-ppc64le, test-s390x, test-loong64.
QEMU_ARCHES := riscv64:qemu-riscv64 ppc64le:qemu-ppc64le s390x:qemu-s390x loong64:qemu-loongarch64
# Every GOARCH with counter assembly: a purego build of each links none.
ASM_ARCHES  := amd64 arm64 riscv64 ppc64le s390x loong64
STATICCHECK_VERSION ?= v0.8.2
BENCHSTAT_VERSION   ?= v0.0.0-20260908200009-22c9c6c9d4da
# make cross covers every GOOS/GOARCH pair `go tool dist list` names
# (see cross); CROSS=linux/amd64,netbsd/arm64 narrows it to a list.
CROSS     ?=
CROSS_VET ?=

.PHONY: go127 test qualify test-full mutants-slow cross-quick lint race unit ordering purego test-arm64 test-riscv64 test-ppc64le test-s390x test-loong64 cross bench tail fuzz fuzz-short mutants mutants-fast peers peers-test stress integrations kernel-trace slew

# Two layers of tests. A plain go test ./... is the fast layer: it proves
# the guarantees by construction (synthetic counters and pages, manual
# and testing/synctest clocks, tables), sleeps no real time to speak of,
# and passes on any machine, loaded or not. The qualification layer
# (tests that start with testenv.Qualify) needs real hardware, load or
# long time: the cross-CPU ordering on the real counters, the SIGPROF
# stress, idle CPU, the binary's weight, first calls, the strace of the
# import, the real clock pages, the joins with perf's and ftrace's stamps
# (root, perf and tracefs; each skips saying which is missing) and the
# kernel's clocksource switches; SCHEDCLOCK_QUALIFY=1 turns it on.
#
# make test: gofmt, vet and staticcheck; then, two at a time (each
# keeps about one CPU busy), the fast layer under the race detector and
# as the arm64 build under qemu, the cross-builds and the example
# modules; then the fast layer and the qualification layer natively,
# alone (its tests switch the kernel's clocksource, which a test run
# beside it would see change under it). The mutants, which take longer
# than all of that on two CPUs, are make test-full's (make mutants).
test: lint
	@$(MAKE) --no-print-directory --output-sync=target -j2 race test-arm64 cross-quick integrations
	@$(MAKE) --no-print-directory qualify

# The fast layer and the qualification layer, natively (the qualification
# tests run beside the fast ones: go test selects by name, not by layer),
# one package at a time (-p 1): a qualification test measures the machine,
# or switches its clocksource, and another package's tests must not run
# beside it.
qualify:
	SCHEDCLOCK_QUALIFY=1 SCHEDCLOCK_KERNEL_TRACE=1 $(GO) test -p 1 -count=1 ./...

# The full matrix: make test, then the pure-Go build, every pair of
# cross-builds, every other architecture's fast layer under its
# qemu-user, every fuzz target briefly, the adjtimex slew, the peers'
# module, and every mutant (make mutants).
test-full: test purego cross test-riscv64 test-ppc64le test-s390x test-loong64 fuzz-short slew peers-test mutants

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	GOFLAGS= $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

# The fast layer under the race detector.
race:
	$(GO) test -race -count=1 ./...

# The fast layer.
unit:
	$(GO) test -count=1 ./...

# The hardware ordering tests alone (part of make qualify), without the
# race detector, whose bookkeeping around every atomic access hides the
# reorderings they must catch.
ordering:
	SCHEDCLOCK_QUALIFY=1 $(GO) test -count=1 -run '^(TestCrossCPUOrdering|TestReadersUnderBackToBackPublications)$$' .

# The pure-Go build must link no assembly and pass the fast layer.
purego:
	@for a in $(ASM_ARCHES); do \
		sfiles=$$(GOARCH=$$a $(GO) list -deps -tags purego -f '{{if and .SFiles .Module}}{{if .Module.Main}}{{.ImportPath}}: {{.SFiles}}{{end}}{{end}}' .); \
		if [ -n "$$sfiles" ]; then echo "purego build for $$a links $$sfiles"; exit 1; fi; \
	done
	$(GO) test -tags purego -count=1 ./...

# The arm64 build, assembly included: the fast layer under user-mode
# qemu (what qemu would measure of idle CPU and spinning is qemu's, not
# the machine's).
test-arm64:
	GOARCH=arm64 $(GO) test -count=1 -exec $(QEMU) ./...

# The riscv64, ppc64le, s390x and loong64 builds, assembly included, each
# running the fast layer under its user-mode qemu.
test-riscv64 test-ppc64le test-s390x test-loong64:
	@arch=$(@:test-%=%); for p in $(QEMU_ARCHES); do [ "$${p%%:*}" = "$$arch" ] && emu=$${p#*:}; done; \
	echo "GOARCH=$$arch $(GO) test -count=1 -exec $$emu ./..."; \
	GOARCH=$$arch $(GO) test -count=1 -exec $$emu ./...

# Every pair `go tool dist list` names, built without cgo (CGO_ENABLED=0,
# what a pure-Go program gets): go build ./..., which links the examples
# and tools, for each. Where the go command says the pair "requires
# external (cgo) linking" (android/386, android/amd64, android/arm and
# ios/*: Go links them only through the C toolchain) the non-main
# packages, the library among them, are compiled, not vetted: the go
# command refuses go vet there too, of every package (its tests link).
# go vet runs once per GOOS, on the first GOARCH dist list names for it
# that links (android/arm64; ios only as darwin, whose files it shares),
# and on every linux GOARCH (asmdecl checks each arch's assembly): 26
# vets, not one per pair, since a vet compiles every test dependency for
# its pair. Measured on a shared 2-vCPU machine (load 12-18): cold, a
# pair's build takes 30-60 s of CPU (the standard library) and its vet
# about 50 s more; warm, 2-3 s of CPU per pair. So the target takes a
# few minutes once the cache holds the pairs, most of an hour before.
# make test's cross-quick builds and vets the four pairs the pre-stop
# checks vet, and builds one pair of each other kind of system the
# package has files for (BSD, Darwin, Windows, Plan 9, AIX, Solaris,
# WebAssembly); every pair, and the purego build vetted on each GOARCH
# with assembly, are make test-full's (cross).
CROSS_QUICK := linux/amd64,linux/arm64,linux/386,linux/riscv64,darwin/arm64,windows/amd64,netbsd/arm64,openbsd/amd64,freebsd/amd64,plan9/amd64,aix/ppc64,solaris/amd64,js/wasm,wasip1/wasm
cross-quick:
	@$(MAKE) --no-print-directory cross CROSS=$(CROSS_QUICK) CROSS_VET="linux/amd64 linux/arm64 linux/386 linux/riscv64"

cross:
	@set -e; export CGO_ENABLED=0; vetted=" "; \
	libs=$$($(GO) list -f '{{if ne .Name "main"}}{{.ImportPath}}{{end}}' ./...); \
	pairs=$$($(GO) tool dist list); [ -z "$(CROSS)" ] || pairs=$$(echo "$(CROSS)" | tr , ' '); \
	for p in $$pairs; do \
		os=$${p%/*}; arch=$${p#*/}; pkgs=./...; \
		if out=$$(GOOS=$$os GOARCH=$$arch $(GO) build ./... 2>&1); then echo "build $$p"; \
		else case "$$out" in \
			*"requires external (cgo) linking"*) echo "build $$p (no link: it needs cgo to link)"; \
				pkgs=$$libs; GOOS=$$os GOARCH=$$arch $(GO) build $$pkgs;; \
			*) echo "build $$p"; echo "$$out"; exit 1;; \
		esac; fi; \
		[ "$$pkgs" = ./... ] || continue; \
		[ -z "$(CROSS_VET)" ] || case " $(CROSS_VET) " in *" $$p "*) ;; *) continue;; esac; \
		case "$$vetted" in *" $$os "*) [ $$os = linux ] || continue;; esac; \
		vetted="$$vetted$$os "; echo "vet $$p"; GOOS=$$os GOARCH=$$arch $(GO) vet ./...; \
	done
	@[ -n "$(CROSS)" ] || for a in amd64 arm64 riscv64 ppc64le s390x loong64; do echo "vet purego $$a"; GOARCH=$$a $(GO) vet -tags purego ./... || exit 1; done

# Benchmarks: ten runs of the read and write paths, summarised by
# benchstat; the README's table comes from one such run. Quote the CPU
# with them. BENCH=. runs all (the cross-CPU check and the tail too).
BENCH ?= ^Benchmark(Now|Coarse|Since|WallNow|TimeSince|TimeNow|ClockGettimeRaw|Raw|Boottime|Portable|Jiffies|Hardware|RDTSCP|NowUnderUpdates|Writer|Refine)$$
bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -benchtime 200ms -count 10 . | tee bench.txt
	GOFLAGS= $(GO) run golang.org/x/perf/cmd/benchstat@$(BENCHSTAT_VERSION) bench.txt

# The distribution of single reads against the bare counter read's.
tail:
	$(GO) test -run '^$$' -bench '^BenchmarkTailLatency$$' -benchtime 5000000x .

# Every fuzz target, one at a time (go test -fuzz takes one): the read
# path's FuzzLine and one per parser of machine input. make test runs
# each for FUZZ_SHORT executions: a count, not a duration, because a
# duration's deadline can fail a run with no crasher ("context deadline
# exceeded" on a loaded machine, a fault of the fuzzer that Go 1.27 fixes);
# make fuzz runs each for FUZZTIME. Minimising a crasher is capped so that
# a short run does not spend itself shrinking the large seeds (the vDSO
# images, a 64 KiB cpuinfo line) instead of fuzzing.
FUZZ_TARGETS := .:FuzzLine \
	./internal/kernel:FuzzClocksource \
	./internal/errata:FuzzCompatible ./internal/errata:FuzzDeviceTree ./internal/errata:FuzzGTDT \
	./internal/errata:FuzzMIDR ./internal/errata:FuzzCPUInfo \
	./internal/vdso:FuzzLookup ./internal/vdso:FuzzAuxv ./internal/vdso:FuzzImageLength \
	./internal/pvclock:FuzzMapsLine ./internal/pvclock:FuzzPvclockPage ./internal/pvclock:FuzzHypervPage ./internal/pvclock:FuzzTimeData \
	./internal/perfclock:FuzzPerfPage \
	./internal/vmclock:FuzzDecode ./internal/clockbound:FuzzDecode ./internal/adjtimex:FuzzReading \
	./internal/testutil/pprofdecode:FuzzSamples \
	./internal/timebase:FuzzDeviceTreeFrequency ./internal/timebase:FuzzCPUInfoTimebase ./internal/timebase:FuzzStableCounterFrequency
FUZZTIME   ?= 30s
FUZZ_SHORT ?= 20000x
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t#*:} ($${t%%:*}) for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 200x "$${t%%:*}" || exit 1; \
	done

fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZ_SHORT)

# The long versions of the qualification layer's checks (about 20
# minutes on a 2-vCPU machine): the stress test's 10^9 readings on every
# P under a SIGPROF flood (now_qualify_test.go), the rate against the raw
# clock over 60 s, 50 runs of narrow counters beside two CPU-bound
# processes, then examples/inconsistency for 60 s on every clock this
# machine offers; a clock the library refuses here (exit status 2) is
# reported with its reason and skipped, an inversion fails.
STRESS_READS    ?= 1000000000
STRESS_DURATION ?= 60s
stress:
	SCHEDCLOCK_QUALIFY=1 SCHEDCLOCK_STRESS_READS=$(STRESS_READS) $(GO) test -run 'Stress' -count=1 -timeout 2h -v .
	SCHEDCLOCK_QUALIFY=1 SCHEDCLOCK_LONG=1 $(GO) test -run '^(TestRateAgainstRaw|TestNarrowCountersBesideCPUHogs|TestWatchRefusesAJumpFarForward)$$' -count=1 -timeout 30m -v .
	@dir=$$(mktemp -d) && trap 'rm -rf "$$dir"' EXIT && \
	$(GO) build -o "$$dir/inconsistency" ./examples/inconsistency && \
	for clock in default portable tsc cntvct jiffies; do \
		"$$dir/inconsistency" -clock $$clock -duration $(STRESS_DURATION); rc=$$?; \
		if [ $$rc -eq 2 ]; then echo "$$clock: not available here"; elif [ $$rc -ne 0 ]; then exit $$rc; fi; \
	done

# schedclock beside time.Now, time.Since and the peer packages, measured in
# one run (1-3 minutes; PEERS_FLAGS=-quick for 20-30 s), printed as
# Markdown for the README. The peers live in a module of their own,
# internal/peers, so this module's go.mod keeps only x/sys and testify, and
# ./... here does not reach them.
peers:
	cd internal/peers && $(GO) run ./cmd/compare $(PEERS_FLAGS)

peers-test:
	cd internal/peers && $(GO) vet ./... && $(GO) test -count=1 ./...

# The logger (zap, zerolog, slog), Prometheus, rate-limiter and
# Kubernetes (k8s.io/utils/clock) examples on schedclock/adapt and the
# README's Quick start, built against the real libraries: a module of its own,
# examples/integrations, so that this module's go.mod keeps only x/sys and
# testify. Its go.sum is committed: a fresh clone needs no -mod=mod.
integrations:
	cd examples/integrations && $(GO) vet ./... && $(GO) test -count=1 ./...

# The fast suite under the other Go release users have: the package leans
# on the runtime's clock and on testing/synctest, which change between
# releases. The go command takes that toolchain from the module proxy.
GO127_TOOLCHAIN ?= go1.27.3
go127:
	GOTOOLCHAIN=$(GO127_TOOLCHAIN) $(GO) version
	GOTOOLCHAIN=$(GO127_TOOLCHAIN) $(GO) test ./...

# KernelTime against the kernel's own stamps (docs/kernel-time.md):
# examples/perfjoin's 10,000 getpid under perf record -k CLOCK_MONOTONIC
# and ftrace's boot clock, alone (make qualify runs them too). Root, perf
# and tracefs; each test skips with the reason where one is missing.
kernel-trace:
	SCHEDCLOCK_KERNEL_TRACE=1 $(GO) test -count=1 -v -run 'Join' ./examples/perfjoin

# The map under adjtimex's ±500 ppm slew: it changes the machine's clock
# frequency for 4 s (and restores it), so only the full matrix runs it.
slew:
	SCHEDCLOCK_QUALIFY=1 SCHEDCLOCK_SLEW=1 $(GO) test -count=1 -v -run 'KernelTime' .

# Every safeguard removed in turn, in a copy of the tree: the tests must
# fail for each (tools/mutants prints the table). Each mutant runs in a
# copy of the tree of its own, MUTANTS_JOBS at once (its go test mostly
# compiles the mutated package, on one CPU), its killers with
# SCHEDCLOCK_QUALIFY=1: the qualification layer's tests too. make
# test-full runs them all, after running each mutation's tests unmutated
# (the baselines). MUTANTS_FLAGS=-baseline-list only checks that each
# mutation's tests exist, for a run right after make qualify;
# -failfast stops each mutant at its first failing test.
MUTANTS_JOBS  ?= 2
MUTANTS_FLAGS ?=
mutants:
	$(GO) run ./tools/mutants -j $(MUTANTS_JOBS) $(MUTANTS_FLAGS)

# The read path's safeguards (the fences, the seq re-checks, the clamps,
# the freezer, the paravirtual page's protocol, the vDSO call's stack),
# amd64's: a few minutes after a change there. mutants-slow has the
# writer side's (the watch, the fold, the wall map, the trust policy,
# the fault record) and the other arches'.
mutants-fast:
	$(GO) run ./tools/mutants -fast -j $(MUTANTS_JOBS) $(MUTANTS_FLAGS)

# The mutations mutants-fast leaves out.
mutants-slow:
	$(GO) run ./tools/mutants -slow -j $(MUTANTS_JOBS) $(MUTANTS_FLAGS)
