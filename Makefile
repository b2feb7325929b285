# Sluice — see README.md. `make demo` shows it working, `make test` proves it.

GO        ?= go
BIN       := bin/sluice
FUZZTIME  ?= 30s
BENCHTIME ?= 500ms
COUNT     ?= 6
SOAKTIME  ?= 2m
FLOODKEYS ?= 10000000
ATTACKFLAGS ?=

.PHONY: all build test fmt vet race test-bins unlocked full fleet fleet-build fleet-run inflight quotafleet demo bench bench-quick bench-work bench-redis bench-rls attack bench-report bench-compile fuzz soak flood load mwload accuracy clean

all: build

# Pebble's zstd codec in Go (klauspost/compress) rather than cgo's
# DataDog/zstd: Sluice's Pebble store writes Snappy tables, so the codec is
# linked and never called, and the C library is about 50 s of every cold
# build in each mode (race and not). The formats are the same: either
# build reads a directory the other wrote. (Filtered first, so that the
# sub-makes of make test, which inherit it, do not add it twice.)
export GOFLAGS := $(strip $(filter-out -tags=pebblegozstd,$(shell $(GO) env GOFLAGS 2>/dev/null)) -tags=pebblegozstd)

# The commit, stamped into the binary for `sluice version` even where the
# environment turns Go's own VCS stamping off (GOFLAGS=-buildvcs=false).
COMMIT := $(shell git rev-parse --short=12 HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -modified)

build:
	$(GO) build -ldflags "-X main.stampedCommit=$(COMMIT)" -o $(BIN) ./cmd/sluice

## test: gofmt, then every package's tests under the race detector with
## go vet's every analyzer run by go test itself (on the race build's own
## compiled packages, so vet adds no compile of its own; packages without
## tests are vetted too), the fuzz targets over their committed seed
## corpora. (The binaries the process, flood, soak and docs tests build
## are normal builds, as an operator runs them.)
## The race build leaves out debug information (race reports name file and
## line without it). Beside it, the fleet's normal build (its test binary
## and toxiproxy's server, linked into bin/test), the unlocked tests, the
## full-size runs and then bench-compile (CI runs bench-compile again after
## make test, which then finds vet's results in the cache), so that they
## overlap the race run, whose last process tests mostly wait, instead of
## following it. Then the fleet's fault tests (a real toxiproxy between
## the Redis store and redis-server) alone, as they measure deadlines,
## from the binaries built beside the race run (fleet-run).
## The race and normal test runs keep the tests' temporary files
## (t.TempDir(): the stores' directories, the served processes' state) on
## /dev/shm, a tmpfs, where it has TESTTMPFREE KiB free; the go command's
## own work (the test binaries) stays in GOTMPDIR or the usual temporary
## directory. The durable stores' fsyncs cost nothing there: on this
## machine's disk, shared with other builds, they were most of the
## engine's and the stores' tests' time (the engine's durable model
## equivalence 102 s to 36 s under the race detector). No test judges what
## fsync puts on a disk: a process that is killed loses nothing a write
## gave the kernel, on either; the full-disk tests mount a tmpfs of their
## own. TESTTMP= keeps them in the usual temporary directory.
TESTTMPFREE ?= 4194304
TESTTMP ?= $(shell avail=$$(df -Pk /dev/shm 2>/dev/null | awk 'NR==2 {print $$4}'); \
	[ -w /dev/shm ] && [ "$${avail:-0}" -ge $(TESTTMPFREE) ] && echo /dev/shm)
TESTENV = $(if $(TESTTMP),TMPDIR=$(TESTTMP) GOTMPDIR=$(or $(shell $(GO) env GOTMPDIR 2>/dev/null),$(or $(TMPDIR),/tmp)))

test: fmt
	@$(MAKE) --no-print-directory -j2 -Oline race fleet-build unlocked full bench-compile
	@$(MAKE) --no-print-directory fleet-run

fmt:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi

## vet: go vet alone, every analyzer, on a normal build (make test runs
## the same analyzers inside its race run).
vet:
	$(GO) vet ./...

## RACEFIRST: the race run's longest packages, named before ./... (which
## then adds the rest once each), so that go test builds and starts them
## first: cmd/sluice alone takes about 100 s, most of it waiting on the
## processes it runs, and started among the last it was the run's tail.
RACEFIRST := ./cmd/sluice ./backend/redis ./backend/bolt ./engine ./backend/pebble
## RACEP: how many test binaries (and builds) the race run runs at once:
## one more than the cores, where go test's default is the cores. The
## process tests (cmd/sluice's, the Redis store's, the soak's) spend most
## of their time waiting on the processes they start, a core idle the
## while: on 2 cores the race run took 212 s at 2 and 154 s at 3 (warm,
## quiet), and 165 s at 4, where the race builds of the CPU-bound
## packages only queued for the cores.
RACEP ?= $(shell echo $$(( $$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1) + 1 )))
race: test-bins
	@command -v redis-server >/dev/null || echo "*** redis-server not found: the Redis tests are SKIPPED (install it: apt-get install -y redis-server) ***"
	$(TESTENV) SLUICE_TEST_BINARY=$(CURDIR)/$(TESTSLUICE) FLOOD_TEST_BINARY=$(CURDIR)/$(TESTFLOOD) $(GO) test -p $(RACEP) -race -count=1 -vet=all -ldflags=-w -gcflags=all=-dwarf=false $(RACEFIRST) ./...

## test-bins: the normal builds of sluice and of the flood command that
## the race run's process tests run (cmd/sluice's and internal/cmd/soak's,
## internal/cmd/flood's), built once into bin/test/ as those tests would
## build them (sluice stamped with cmd/sluice's testCommit) rather than
## linked by each test package into a temporary directory: one link, not
## two, on a clean clone, and none where bin/test/ is up to date (the go
## command then skips the link), about 8 CPU-seconds each.
TESTSLUICE := bin/test/sluice
TESTFLOOD := bin/test/flood
test-bins:
	mkdir -p bin/test
	$(GO) build -buildvcs=false -ldflags "-X main.stampedCommit=abc" -o $(TESTSLUICE) ./cmd/sluice
	$(GO) build -o $(TESTFLOOD) ./internal/cmd/flood

## unlocked: the memory store's reads without a lock (table.ReadUnlocked)
## exist only without the race detector, so their tests, and the engine's
## that decide through them, run once more in a normal build.
unlocked:
	$(TESTENV) $(GO) test -count=1 -run '^Test(ReadUnlocked|Unlocked|Denials|Model)' ./backend/table ./engine

## full: the tests that run smaller under the race detector, where their
## size is most of their cost and not what finds races, at full size in
## a normal build: the engine's model equivalence over the durable stores
## and its settle and lease models on Pebble and bbolt (a quarter of
## rapid's checks under race), the damaged-file rounds
## (half), the memory store's retained heap (skipped under race), bbolt's
## and Pebble's sweep rounds (10,000 keys, not 50,000), the configuration's
## errors on huge values (64 KiB, not 1 MiB), Pebble's conformance suite on
## its default options (skipped under race, where the suite runs with a
## busy sweeper beside it).
full:
	$(TESTENV) $(GO) test -count=1 -run '^(TestDurableModelEquivalence|TestReserveSettleModel|TestLeaseModel|TestDamagedFiles?|TestRetainedHeapPerKey|TestSweepBoundsDisk|TestErrorsQuoteAFewHundredBytes|TestConformanceDefaults)$$' ./engine ./backend/bolt ./backend/pebble ./backend/memory ./config

## fleet-build: builds bench/fleet's test binary and the toxiproxy server
## it runs into bin/test/, without running them: make test builds them
## beside the race run, and fleet-run runs them after it, with no link
## of its own.
FLEETTEST := bin/test/fleet.test
TOXIPROXY := bin/test/toxiproxy-server
fleet-build:
	mkdir -p bin/test
	cd bench && $(GO) test -c -o ../$(FLEETTEST) ./fleet/ && $(GO) build -o ../$(TOXIPROXY) github.com/Shopify/toxiproxy/v2/cmd/server

## fleet-run: the fleet's fault tests (see fleet) from the binaries
## fleet-build left, in bench/fleet as go test runs them, their output
## shown, as go test shows it, where they fail.
fleet-run:
	@cd bench/fleet && if TOXIPROXY_SERVER=$(CURDIR)/$(TOXIPROXY) $(CURDIR)/$(FLEETTEST) -test.count=1 -test.timeout=10m \
		-test.skip '^TestInFlightFleet$$' >$(CURDIR)/$(FLEETTEST).out 2>&1; then echo "ok  	bench/fleet"; \
	else cat $(CURDIR)/$(FLEETTEST).out; echo "FAIL	bench/fleet"; exit 1; fi

## bench-compile: the bench module (its peers' libraries included)
## type-checks and passes vet, tests and benchmarks included; make test
## runs it beside the race run, and CI after make test.
bench-compile:
	cd bench && $(GO) vet ./...

## fleet: bench/fleet's fault tests: latency with jitter, a narrow link, a
## gateway short of CPU, a black hole, reset connections, slow closes and a
## Sentinel failover, each under 64 callers on the default options. The
## in-flight run across 3 serve processes and nginx (a minute, with CPU
## burners) is make inflight's; cmd/sluice's slot tests hold the same
## fleet bound (3 gateways, limit 10, counted at the upstream) in make test.
fleet: fleet-build
	@$(MAKE) --no-print-directory fleet-run

## inflight: bench/fleet's in-flight run alone, its figures printed: 3
## sluice serve processes on one Redis against 3 nginx with limit_conn,
## then the sluice fleet under faults for each on_store_error policy (see
## bench/INFLIGHT.md).
inflight:
	cd bench && $(GO) test -count=1 -v -run '^TestInFlightFleet$$' ./fleet/

## quotafleet: a hierarchy quota (an organisation's pool, its users'
## budgets within it) on 3 sluice serve processes over a 3-node Redis
## Cluster, against envoyproxy/ratelimit's nested descriptors on one
## redis-server (built from the module proxy into a temporary folder) and
## sluice rls, the same skewed calls from 64 callers beside 2 CPU burners;
## then a gateway killed and a Cluster node crashed mid-run. About 2
## minutes; the report is bench/out/quotafleet.md, a run's tables
## bench/QUOTAFLEET.md.
quotafleet:
	mkdir -p bench/out
	cd bench && $(GO) run ./cmd/quotafleet -out out/quotafleet.md

## demo: the demo on Pebble under ./var/demo, then a second process on the
## same directory showing the budget survived the restart.
demo: build
	./$(BIN) demo --backend pebble --dir var/demo
	./$(BIN) demo --backend pebble --dir var/demo --resume

## bench: the benchmark suite in bench/ (its own module), COUNT runs each,
## written to bench/out/bench.txt for the report, then the accuracy table
## and the load test of `sluice serve` (bench/out/accuracy.md, load.md).
BENCHCMD = go test -run '^$$' -bench . -benchmem -count $(COUNT) -benchtime $(BENCHTIME) -timeout 90m ./...
bench:
	mkdir -p bench/out
	cd bench && { echo "command: $(BENCHCMD)"; echo "date: $$(date -u '+%F %H:%M UTC')"; $(BENCHCMD); } | tee out/bench.txt
	$(MAKE) accuracy load

## bench-quick: the six memory workloads for Sluice (defaults and opt-in
## variants) against go-limiter and x/time/rate, in interleaved rounds,
## about 4 minutes; prints per workload the best Sluice ÷ fastest peer.
bench-quick:
	cd bench && $(GO) run ./cmd/quick

## bench-work: the instructions and simulated cache misses of one
## decision, Sluice's and the fastest peers', under valgrind (which must be
## installed: apt-get install -y valgrind); counts that do not move with the
## machine's load. A few minutes; the table is bench/out/work.md.
bench-work:
	mkdir -p bench/out
	cd bench && $(GO) run ./cmd/work -out out/work.md

## bench-redis: the Redis-backed limiters side by side against one local
## redis-server that the program starts (decisions/s, p50/p99, round trips
## per decision, accuracy across processes), about 10 minutes; the report
## is bench/out/redis.md, its headline tables bench/REDIS.md.
bench-redis:
	mkdir -p bench/out
	cd bench && $(GO) run ./cmd/redisbench -out out/redis.md

## bench-rls: `sluice rls` decisions/s and p50/p99 over loopback gRPC at
## 1, 16 and 64 concurrent callers on memory, Pebble and Redis, and on
## Redis against envoyproxy/ratelimit (built from the module proxy into a
## temporary folder) on the same redis-server: hot descriptor, 10,000
## users, a 1,000-call burst; about 5 minutes; the report is
## bench/out/rls.md, its headline tables bench/RLS.md.
bench-rls:
	mkdir -p bench/out
	cd bench && $(GO) run ./cmd/rlsbench -out out/rls.md

## attack: the floods of the hostile-edges review against bin/sluice,
## on loopback, each bounded in count and time: one ShouldRateLimit call
## of 80,000 and of 100,000 descriptors (1 s deadline), 200 calls with
## distinct 1 MB and 4 KiB descriptor values, 64 slow bodies at 1 B/s and
## 500 idle keep-alive connections through serve; the same against
## envoyproxy/ratelimit (built from the module proxy into a temporary
## folder, on redis-server) and nginx where installed. Prints per flood
## the server's RSS and CPU and a normal caller's p50/p99; about 5
## minutes; the report is bench/out/attack.md. ATTACKFLAGS adds flags,
## such as -serve-args '--some-flag 10s' or -rls-args '...'.
attack: build
	mkdir -p bench/out
	cd bench && $(GO) run ./cmd/attack -sluice ../$(BIN) -out out/attack.md $(ATTACKFLAGS)

## accuracy: every algorithm of every library on one bursty trace.
accuracy:
	mkdir -p bench/out
	cd bench && $(GO) run ./cmd/accuracy -out out/accuracy.md

## load: `sluice serve` under load on loopback against its upstream direct.
load:
	mkdir -p bench/out
	cd bench && $(GO) run ./cmd/loadtest -out out/load.md

## mwload: Sluice's per-handler middleware, httprate and go-limiter on
## loopback, 64 callers in flight beside two CPU burners: exactness and
## throughput in interleaved rounds, a few minutes; bench/out/mwload.md.
mwload:
	mkdir -p bench/out
	cd bench && $(GO) run ./cmd/mwload -out out/mwload.md

## bench-report: regenerate bench/RESULTS.md and bench/plots/ from bench/out/.
bench-report:
	cd bench && $(GO) run ./cmd/report -in out/bench.txt -out RESULTS.md

## soak: `sluice serve` on Pebble under load with hot reloads for SOAKTIME,
## then checks: no 5xx, no caller over its limits, bounded RSS, reload
## counters, a clean SIGTERM and a store that reopens.
soak:
	$(GO) run ./internal/cmd/soak -duration $(SOAKTIME)

## flood: FLOODKEYS distinct keys through memory (as serve runs it, then
## capped by MaxKeys) and through Pebble; exits 1 naming a broken bound.
flood:
	$(GO) run ./internal/cmd/flood -keys $(FLOODKEYS) -backend memory
	$(GO) run ./internal/cmd/flood -keys $(FLOODKEYS) -backend memory -maxkeys 100000
	$(GO) run ./internal/cmd/flood -keys $(FLOODKEYS) -backend pebble

## fuzz: every fuzz target for FUZZTIME each.
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$target"; \
	    $(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

clean:
	rm -rf bin bench/out
