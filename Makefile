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

# The tests that need a real Apache Kafka (4.x, fetched from Maven Central by
# ci/kafka/pom.xml, cached in ~/.m2): a one-node KRaft broker on loopback,
# placement agreement with Kafka's Java client, and the sqllogictest suite
# against that broker. Needs java (17+) and mvn; see ci/kafka/run.sh.
.PHONY: test-kafka
test-kafka:
	GO=$(GO) bash ci/kafka/run.sh

# End-to-end throughput baseline on the embedded broker (see bench/e2e).
bench:
	$(GO) run ./bench/e2e -events 1000000 -keys 10000

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin turbinesql-data
