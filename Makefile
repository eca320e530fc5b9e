# schedclock: make test runs everything CI runs.
GO        ?= go
QEMU      ?= qemu-aarch64
STATICCHECK_VERSION ?= v0.8.2
BENCHSTAT_VERSION   ?= v0.0.0-20260908200009-22c9c6c9d4da
CROSS     := linux/amd64 linux/arm64 linux/386 linux/arm linux/riscv64 darwin/amd64 darwin/arm64 windows/amd64 freebsd/amd64

.PHONY: test lint race unit ordering purego test-arm64 cross bench fuzz mutants mutants-fast

test: lint race ordering purego test-arm64 cross

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	GOFLAGS= $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

race:
	$(GO) test -race -count=1 ./...

unit:
	$(GO) test -count=1 ./...

# The hardware ordering tests without the race detector, whose bookkeeping
# around every atomic access hides the reorderings they must catch.
ordering:
	$(GO) test -count=1 -run '^(TestCrossCPUOrdering|TestReadersUnderBackToBackPublications)$$' .

# The pure-Go build must link no assembly and pass the same tests.
purego:
	@sfiles=$$($(GO) list -tags purego -f '{{.SFiles}}' .); if [ "$$sfiles" != "[]" ]; then echo "purego build links $$sfiles"; exit 1; fi
	$(GO) test -tags purego -count=1 ./...

# The arm64 build, assembly included, run under user-mode qemu.
test-arm64:
	GOARCH=arm64 $(GO) test -count=1 -exec $(QEMU) ./...

cross:
	@for p in $(CROSS); do \
		echo "vet $$p"; \
		GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) vet ./... || exit 1; \
		GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build ./... || exit 1; \
	done
	GOARCH=amd64 $(GO) vet -tags purego ./...
	GOARCH=arm64 $(GO) vet -tags purego ./...

# Benchmarks: ten runs, summarised by benchstat. Quote the CPU with them.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 10 . | tee bench.txt
	GOFLAGS= $(GO) run golang.org/x/perf/cmd/benchstat@$(BENCHSTAT_VERSION) bench.txt

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzLine -fuzztime 30s .

# Every safeguard of the read path removed in turn, in a copy of the tree:
# the tests must fail for each (tools/mutants prints the table).
mutants:
	$(GO) run ./tools/mutants

# The CI subset: the logical safeguards and the LFENCEs.
mutants-fast:
	$(GO) run ./tools/mutants -fast
