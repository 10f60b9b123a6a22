# ringlimit's commands. `make test` is the test command the README gives and
# .ci/run runs: every module, under -race, then the 32-bit run.
# `make test-module M=redisstore` runs one module (any folder with a go.mod).
# Every module is in the committed go.work, so each builds against its
# siblings' code in this checkout (docs/contributing.md).

GO        ?= go
BENCHSTAT ?= $(GO) run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
COUNT     ?= 6
OUT       ?= bench/out

# The modules a user imports or runs, in the order make test runs them,
# and the consumer check's tool.
# bench/peers (the peer comparison) runs its short tests only.
MODULES = . redisstore grpclimit promlimit otellimit examples/httpserver examples/grpcserver examples/recipes internal/tools/modproxy

.PHONY: test test-module fmt vet race modules peers-short test386 maponly long stress fuzz bench peers profile decompose consumer tidy lint release-check

test: fmt modules peers-short test386 maponly

fmt:
	@files=$$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'); \
	unformatted=$$(gofmt -l $$files); test -z "$$unformatted" || { echo "gofmt needed:"; echo "$$unformatted"; exit 1; }

# vet and race: the root module alone.
vet:
	$(GO) vet ./...

# Fuzz targets run on their seed corpus as part of go test.
race:
	$(GO) test -race -count=1 ./...

# Each module's vet and tests under -race (.ci/modules). The root module
# runs beside the others, which run one after another: the root's engine
# tests keep a core busy while the others mostly wait on redis-server and
# the network. Each module's log is printed whole as soon as it ends, in
# the order they end, with a PASS or FAIL line; every module runs, and any
# failure fails the step.
modules:
	@GO=$(GO) .ci/modules $(MODULES)

# The engine's reference-model, reclamation, concurrency and stress tests
# once more on the map alone (RINGLIMIT_SLAB=default: a table's home slab
# starts at its default threshold, which these tests' few keys never
# reach; the rest of make test starts it at the first key).
MAPONLY_TESTS = TestPropertyMatchesReference|FuzzOperations|TestAllowMatchesAllowN|TestMatchesReference.*|TestSettleKeepsAnUntouchedSlotDead|TestReferenceTagJumpsAtWideN|TestNewKeyBehindTheClockStartsAtItsShardsFloor|TestRefusedReviveKeepsShardFloorAtClock|TestSweepFloorStaysAtClock|TestSweepOnReplayTimelineLeavesNewKeysOnIt|TestWriterBehindSweepDoesNotReviveKeyInThePast|TestLogGrowReclaim.*|TestConcurrent.*|TestEvictionRacingWriters|TestRacingWritersStayWithinBounds|TestRaceAtBoundaryLeavesNoResidue|TestFarWriterRevivalKeepsKeysApart|TestReclaimed.*UnderChurn|TestKeysAtMaxKeysUnderChurn|TestStress|TestTokenBucketStress|TestNewKeyJustBehindTheClockIsDecidedAtItsOwnTime
maponly:
	@echo "== engine on the map alone (RINGLIMIT_SLAB=default)"
	RINGLIMIT_SLAB=default $(GO) test -race -count=1 -run '^($(MAPONLY_TESTS))$$' ./engine/

# bench/peers' vet and short tests, less bench/peers/redisrate: it holds
# only BenchmarkVsRedisRate, whose go-redis/redis_rate make test would
# otherwise download for nothing (make lint still type-checks it).
peers-short:
	@echo "== bench/peers: go vet, go test -short (all but redisrate)"
	cd bench/peers && pkgs=$$($(GO) list ./... | grep -v '/bench/peers/redisrate$$') && $(GO) vet $$pkgs && $(GO) test -short -count=1 $$pkgs

# staticcheck in every module, with its doc-comment checks (ST1020–ST1022:
# a doc comment starts with the name it documents) on top of the defaults.
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	@set -e; for m in $(MODULES) bench/peers; do \
		echo "== $$m: staticcheck"; \
		(cd $$m && $(STATICCHECK) -checks 'inherit,ST1020,ST1021,ST1022' ./...); \
	done

M ?=
test-module:
	@test -n "$(M)" && test -f "$(M)/go.mod" || { echo "usage: make test-module M=<folder with a go.mod>, one of: $(MODULES) bench/peers"; exit 2; }
	cd $(M) && test -z "$$(gofmt -l .)" && $(GO) vet ./... && $(GO) test -race -count=1 ./...

# 32-bit: catches misaligned 64-bit atomics. -race does not exist on 386.
# The 386 test binaries run natively where the kernel can run them, else
# under qemu-i386 (Debian's qemu-user; Go's async preemption signals are
# turned off there, which qemu-user mishandles), else the step says loudly
# that it skipped. TEST386=qemu forces qemu, TEST386=native forbids it.
PKGS386 = ./internal/... ./ringslot/ ./shard/ ./engine/ ./httplimit/
TEST386 ?= auto
test386:
	@probe=$$(mktemp -d); GOARCH=386 $(GO) test -c -o $$probe/p.test ./internal/pack/ || exit 1; \
	if [ "$(TEST386)" != qemu ] && $$probe/p.test -test.run '^$$' >/dev/null 2>&1; then how=native; \
	elif [ "$(TEST386)" != native ] && command -v qemu-i386 >/dev/null; then how=qemu; \
	else how=none; fi; rm -rf $$probe; \
	case $$how in \
	native) echo "test386: running 386 binaries natively"; GOARCH=386 $(GO) test -short -count=1 $(PKGS386) ;; \
	qemu) echo "test386: this kernel cannot run 386 binaries (or TEST386=qemu): running them under qemu-i386"; \
	      GODEBUG=asyncpreemptoff=1 GOARCH=386 $(GO) test -short -count=1 -exec qemu-i386 $(PKGS386) ;; \
	*) echo "test386: SKIPPED: this kernel cannot run 386 binaries and qemu-i386 is missing (apt-get install qemu-user); the 32-bit atomics alignment was NOT tested" ;; \
	esac

# The long form of the randomized tests (more seeds, every permutation,
# the full storms; engine/long_test.go), under -race, then make stress.
# make test runs their short form.
long:
	RINGLIMIT_LONG=1 $(GO) test -race -count=1 -timeout 60m ./...
	$(MAKE) stress

# The stress checkers (engine/stress_test.go, and tokenstress_test.go for
# the token bucket) for STRESS per algorithm or bucket shape, under -race;
# `make test` runs them for 1 s each, and -short skips them.
STRESS ?= 2m
stress:
	$(GO) test -race -count=1 -run '^(TestStress|TestTokenBucketStress)$$' -v -timeout 60m ./engine/ -stress=$(STRESS)

# Longer fuzzing by hand, e.g. make fuzz FUZZTIME=10m. Commit any crasher
# that testdata/fuzz gains: it becomes a regression seed.
FUZZTIME ?= 60s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzPack$$' -fuzztime $(FUZZTIME) ./internal/pack/
	$(GO) test -run '^$$' -fuzz '^FuzzOperations$$' -fuzztime $(FUZZTIME) ./engine/
	$(GO) test -run '^$$' -fuzz '^FuzzReserveCancel$$' -fuzztime $(FUZZTIME) ./engine/
	$(GO) test -run '^$$' -fuzz '^FuzzCostEdges$$' -fuzztime $(FUZZTIME) ./engine/
	$(GO) test -run '^$$' -fuzz '^FuzzTokenBucketOperations$$' -fuzztime $(FUZZTIME) ./engine/
	cd redisstore && $(GO) test -run '^$$' -fuzz '^FuzzTokenBucketRate$$' -fuzztime $(FUZZTIME) .
	cd redisstore && $(GO) test -run '^$$' -fuzz '^FuzzTokenBucketWait$$' -fuzztime $(FUZZTIME) .
	cd redisstore && $(GO) test -run '^$$' -fuzz '^FuzzTokenBucketOperations$$' -fuzztime $(FUZZTIME) .
	cd redisstore && $(GO) test -run '^$$' -fuzz '^FuzzHeldOperations$$' -fuzztime $(FUZZTIME) -parallel 2 .

# The scenario table (bench/): medians of COUNT runs, one column per
# algorithm, via benchstat; then the layout and memory figures.
bench:
	mkdir -p $(OUT)
	$(GO) test -run '^$$' -bench 'Allow' -benchmem -count $(COUNT) -timeout 60m ./bench/ | tee $(OUT)/scenarios.txt
	$(BENCHSTAT) -col /alg $(OUT)/scenarios.txt
	$(GO) test -run '^$$' -bench 'Layout' -benchtime 1x -count $(COUNT) -timeout 60m ./bench/ | tee $(OUT)/memory.txt
	$(BENCHSTAT) $(OUT)/memory.txt

# The peer comparison (bench/peers, its own module): writes bench/peers/RESULTS.md.
# run.sh's knobs pass through from the command line, e.g.
# `make peers ROUNDS=9 CELL=50ms RUNS=1` (ROUNDS, CELL, RUNS, SHORT, GC, CPU,
# RENDER: see run.sh); COUNT is make bench's, which run.sh has no use for.
peers:
	cd bench/peers && ./run.sh

# The CPU profile of the hot path, read as a top list.
profile:
	mkdir -p $(OUT)
	$(GO) test -run '^$$' -bench 'HotKey/alg=sliding/clock=at' -benchtime 20000000x -cpuprofile $(OUT)/cpu.prof -o $(OUT)/engine.test ./engine/
	$(GO) tool pprof -top -nodecount 25 $(OUT)/engine.test $(OUT)/cpu.prof

# The decomposition of one decision at 1M keys (docs/benchmarks.md): a CPU
# profile of the engine under b.RunParallel as a top list, then cachegrind
# counts per decision (instructions, simulated D1 and LL misses) for the
# limiters in PEERS, from the difference of two runs with N1 and N2
# decisions, and per source file and function for those in DETAIL. Needs
# valgrind; about 6 minutes. Writes bench/peers/out/decompose/decompose.md.
decompose:
	cd bench/peers && mkdir -p out/decompose && ./decompose.sh | tee out/decompose/decompose.md

# The published modules resolve as published: zipped at VERSION into a
# file-based GOPROXY, fetched with go get by modules outside the checkout
# (no go.work, no replace), built and run (.ci/consumer).
VERSION ?= v0.1.0
consumer:
	VERSION=$(VERSION) .ci/consumer

# go mod tidy in every module of go.work, through the same file-based
# GOPROXY: tidy reads no go.work, and the siblings' VERSION is not on the
# module proxy before it is tagged (.ci/tidy).
tidy:
	VERSION=$(VERSION) .ci/tidy

# The version about to be tagged agrees everywhere it is written: the
# siblings' requirements, go.work, CHANGELOG.md and its tag list, the
# published modules' LICENSEs (.ci/release-check; docs/contributing.md).
# FINAL=1 before tagging: the version's date, an empty Unreleased.
FINAL ?=
release-check:
	VERSION=$(VERSION) FINAL=$(FINAL) .ci/release-check
