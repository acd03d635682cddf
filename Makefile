# TurbineSQL. `make test` is what CI runs; `make bench` prints the figures.
GO ?= go

.PHONY: build test vet race bench run clean fmt

build:
	$(GO) build -o bin/turbinesql ./cmd/turbinesql

# Builds and starts the embedded default: Kafka in process, pgwire on :5433.
run: build
	./bin/turbinesql serve

vet:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

# Every test, with the race detector: unit tests and the sqllogictest suite
# (testdata/sqllogic/*.slt against a real server over pgwire).
test: vet
	$(GO) test -race -count=1 -timeout 15m ./...

# End-to-end throughput baseline on the embedded broker (see bench/e2e).
bench:
	$(GO) run ./bench/e2e -events 1000000 -keys 10000

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin turbinesql-data
