# Sluice — see README.md. `make demo` shows it working, `make test` proves it.

GO        ?= go
BIN       := bin/sluice
FUZZTIME  ?= 30s
BENCHTIME ?= 500ms
COUNT     ?= 6

.PHONY: all build test vet race demo bench bench-report bench-compile fuzz clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/sluice

## test: vet, then every package's tests under the race detector; the fuzz
## targets run over their committed seed corpora; the bench module must build.
test: vet race bench-compile

vet:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

race:
	$(GO) test -race -count=1 ./...

bench-compile:
	cd bench && $(GO) vet ./... && $(GO) test -count=1 -run '^$$' -bench '^$$' ./...

## demo: the demo on Pebble under ./var/demo, then a second process on the
## same directory showing the budget survived the restart.
demo: build
	./$(BIN) demo --backend pebble --dir var/demo
	./$(BIN) demo --backend pebble --dir var/demo --resume

## bench: the benchmark suite in bench/ (its own module), COUNT runs each,
## written to bench/out/ for benchstat.
bench:
	mkdir -p bench/out
	cd bench && $(GO) test -run '^$$' -bench . -benchmem -count $(COUNT) -benchtime $(BENCHTIME) -timeout 60m ./... | tee out/bench.txt

## bench-report: regenerate bench/RESULTS.md from bench/out/bench.txt.
bench-report:
	cd bench && $(GO) run ./cmd/report -in out/bench.txt -out RESULTS.md

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
