# ringlimit's commands. `make test` is the test command the README gives and
# .ci/run runs; `make bench` regenerates the README's benchmark table.

GO        ?= go
BENCHSTAT ?= $(GO) run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
COUNT     ?= 6
OUT       ?= bench/out

.PHONY: test vet race test386 stress fuzz bench peers profile

test: vet race test386

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...

# Fuzz targets run on their seed corpus as part of go test.
race:
	$(GO) test -race -count=1 ./...

# 32-bit: catches misaligned 64-bit atomics. -race does not exist on 386.
test386:
	GOARCH=386 $(GO) test -short -count=1 ./internal/... ./ringslot/ ./shard/ ./engine/

# The stress checker (engine/stress_test.go) for STRESS per algorithm, under
# -race; `make test` runs it for 1 s each, and -short skips it.
STRESS ?= 2m
stress:
	$(GO) test -race -count=1 -run '^TestStress$$' -v -timeout 60m ./engine/ -stress=$(STRESS)

# Longer fuzzing by hand, e.g. make fuzz FUZZTIME=10m. Commit any crasher
# that testdata/fuzz gains: it becomes a regression seed.
FUZZTIME ?= 60s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzPack$$' -fuzztime $(FUZZTIME) ./internal/pack/
	$(GO) test -run '^$$' -fuzz '^FuzzOperations$$' -fuzztime $(FUZZTIME) ./engine/

# The scenario table (bench/): medians of COUNT runs, one column per
# algorithm, via benchstat; then the layout and memory figures.
bench:
	mkdir -p $(OUT)
	$(GO) test -run '^$$' -bench 'Allow' -benchmem -count $(COUNT) -timeout 60m ./bench/ | tee $(OUT)/scenarios.txt
	$(BENCHSTAT) -col /alg $(OUT)/scenarios.txt
	$(GO) test -run '^$$' -bench 'Layout' -benchtime 1x -count $(COUNT) -timeout 60m ./bench/ | tee $(OUT)/memory.txt
	$(BENCHSTAT) $(OUT)/memory.txt

# The peer comparison (bench/peers, its own module): writes bench/peers/RESULTS.md.
peers:
	cd bench/peers && COUNT=$(COUNT) ./run.sh

# The CPU profile of the hot path, read as a top list.
profile:
	mkdir -p $(OUT)
	$(GO) test -run '^$$' -bench 'HotKey/alg=sliding/clock=at' -benchtime 20000000x -cpuprofile $(OUT)/cpu.prof -o $(OUT)/engine.test ./engine/
	$(GO) tool pprof -top -nodecount 25 $(OUT)/engine.test $(OUT)/cpu.prof
