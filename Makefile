# TurbineSQL. `make test` is what CI runs; `make bench` prints the figures.
GO ?= go

.PHONY: build test vet race bench run clean fmt demo-reset

build:
	$(GO) build -o bin/turbinesql ./cmd/turbinesql

# Builds and starts the embedded default: Kafka in process, pgwire on :5433.
run: build
	./bin/turbinesql serve

# Forgets everything `make run` created (catalog, topics, state): stop the
# server first (a running one holds turbinesql-data/turbine.pid).
demo-reset:
	@if [ -e turbinesql-data/turbine.pid ] && ! flock -n turbinesql-data/turbine.pid true; then \
		echo "a server is running on turbinesql-data ($$(cat turbinesql-data/turbine.pid)): stop it first"; exit 1; fi
	rm -rf turbinesql-data

vet:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

# Every test, with the race detector: unit tests and the sqllogictest suite
# (testdata/sqllogic/*.slt against a real server over pgwire).
test: vet
	$(GO) test -race -count=1 -timeout 15m -parallel 4 ./...

# The web console in headless Chromium (Debian's chromium package, driven
# by chromedp): every page loaded against a running server, its rendered
# text checked, a screenshot of each written to $(CONSOLE_SHOTS).
CONSOLE_SHOTS ?= $(CURDIR)/bin/console-shots
.PHONY: test-console
test-console:
	TURBINE_CONSOLE_SHOTS=$(CONSOLE_SHOTS) CI_REQUIRE_CHROMIUM=$${CI_REQUIRE_CHROMIUM:-1} \
		$(GO) test -tags console -count=1 -run TestConsoleChromium ./server

# The scalar functions against a real PostgreSQL (Debian's postgresql
# package): every expression of testdata/pgoracle/exprs.txt in a cluster
# the test starts itself and in TurbineSQL (bounded SELECT and a stream),
# text results and SQLSTATEs compared. Fails without PostgreSQL.
.PHONY: test-pg
test-pg:
	$(GO) test -tags pgoracle -count=1 -run TestPGOracle -v ./server

# The tests that need a real Apache Kafka (4.x, fetched from Maven Central by
# ci/kafka/pom.xml, cached in ~/.m2): a one-node KRaft broker on loopback,
# placement agreement with Kafka's Java client, and the sqllogictest suite
# against that broker. Needs java (17+) and mvn; see ci/kafka/run.sh.
.PHONY: test-kafka
test-kafka:
	GO=$(GO) bash ci/kafka/run.sh

# Client compatibility (clients/run.sh): psql, pgx (every QueryExecMode),
# PgJDBC and psycopg 3 each run a scripted session against a fresh server,
# and sqllogictest-rs runs every portable testdata/sqllogic/*.slt over
# pgwire, a fresh server per file. Needs psql, java 17 and mvn, python3 and
# cargo (for slt-rs); a missing one fails the run.
.PHONY: test-clients test-slt-rs slt-rs
test-clients: build slt-rs
	SQLLOGICTEST=$(SLT_RS) clients/run.sh

# Only the sqllogictest-rs part of test-clients.
test-slt-rs: build slt-rs
	SQLLOGICTEST=$(SLT_RS) clients/run.sh slt-rs

# sqllogictest-rs (crates.io sqllogictest-bin), compiled once into
# $(SLT_RS_ROOT) and reused while its version matches. A debug build: it
# only drives SQL files over pgwire, and compiles in a quarter of the CPU
# time of a release build (4 CPU-minutes here; a release build took about
# 17 minutes of CI's 60 on a new machine).
SLT_RS_VERSION = 0.29.1
SLT_RS_ROOT ?= $(HOME)/.cargo
SLT_RS = $(SLT_RS_ROOT)/bin/sqllogictest
slt-rs:
	@if [ "$$($(SLT_RS) --version 2>/dev/null)" != "sqllogictest-bin $(SLT_RS_VERSION)" ]; then \
		echo "installing sqllogictest-bin $(SLT_RS_VERSION) into $(SLT_RS_ROOT)"; \
		cargo install sqllogictest-bin --version $(SLT_RS_VERSION) --locked --debug --root $(SLT_RS_ROOT); \
	fi

# Each fuzz target for a short run (CI); longer: make fuzz FUZZTIME=10m.
# The default is a count of executions, not a duration: Go 1.26's fuzz
# coordinator can fail a run "context deadline exceeded" at a duration's
# end when its workers are starved (a race in its own shutdown),
# which CI hit with nothing found.
FUZZTIME ?= 20000x
.PHONY: fuzz
fuzz:
	$(GO) test ./exec -run '^$$' -fuzz '^FuzzDecodeJSON$$' -fuzztime $(FUZZTIME)
	$(GO) test ./exec -run '^$$' -fuzz '^FuzzEval$$' -fuzztime $(FUZZTIME)
	$(GO) test ./exec -run '^$$' -fuzz '^FuzzGenExpr$$' -fuzztime $(FUZZTIME)
	$(GO) test ./pgwire -run '^$$' -fuzz '^FuzzPGWireMessages$$' -fuzztime $(FUZZTIME)

# Benchmarks; each prints its figures and a baseline measured in the same
# run: the hash aggregation against a Go map loop, JSON decoding against
# encoding/json, and end to end (broker in a child process) TUMBLE and HOP
# against a read-only consumer; the repartition and combine hops against
# each other under Zipf skew; and keyed state larger than the group cache
# (bench/state, TUMBLE at 10^5 to 10^7 keys beside 10^4 keys all in memory,
# for the aggregation alone and through the whole engine, and SESSION); W2 run by 1, 2 and 3 members of one app (bench/scale).
bench:
	$(GO) run ./bench/hashagg -rows 10000000
	$(GO) run ./bench/decode -records 2000000
	$(GO) run ./bench/e2e -events 1000000 -keys 10000 -window tumble
	$(GO) run ./bench/e2e -events 1000000 -keys 10000 -window hop
	$(GO) run ./bench/e2e -events 1000000 -keys 100 -window tumble
	$(GO) run ./bench/e2e -events 1000000 -keys 100 -window hop
	$(GO) run ./bench/hops -events 1000000 -users 10000 -partitions 2
	$(GO) run ./bench/hops -events 1000000 -users 10000 -partitions 4
	$(GO) run ./bench/eos -events 1000000 -keys 10000
	$(GO) run ./bench/state -baseline 10000 -keys 100000,1000000,10000000 -cache-mb 64,1024
	$(GO) run ./bench/state -engine -baseline 10000 -keys 100000,1000000,10000000 -cache-mb 64,1024
	$(GO) run ./bench/state -keys 10000,100000 -cache-mb 64,0 -window session
	$(GO) run ./bench/scale -events 2000000 -members 3

# The crash/restart audit (package audit, `turbinesql audit`): the server as
# a child process against a broker in its own process, input produced
# throughout from outside, the server SIGKILLed (or stopped) K times and
# restarted on its data dir, then every pane of every (window kind x plan)
# read read_committed and audited against an independent computation.
# Prints the seed; replay with bin/turbinesql audit -seed X ... (the flags
# it prints).
#
# chaos / chaos-short: at-least-once streams (a duplicated pane is counted,
# a lost or wrong one fails), with broker restarts and a full disk too.
.PHONY: chaos chaos-short audit audit-cluster soak
chaos: build
	./bin/turbinesql audit -guarantee at_least_once -kills 15 -sigterm 0.25 -broker-restarts 1 -disk-full 1 -events 0 -seconds 240 -rate 400 $(CHAOSFLAGS)

chaos-short: build
	./bin/turbinesql audit -guarantee at_least_once -kills 5 -sigterm 0.25 -disk-full 1 -events 0 -seconds 60 -rate 400 $(CHAOSFLAGS)

# audit: exactly-once streams of every plan, 200k events, 10 server faults
# (a fifth of them clean SIGTERM stops) and a broker restart; any
# duplicated pane fails too (what .ci/run runs).
audit: build
	./bin/turbinesql audit -events 200000 -kills 10 -sigterm 0.2 -broker-restarts 1 $(CHAOSFLAGS)

# audit-cluster: a rolling upgrade under faults. Three server processes
# share the app (own data dirs, ports and node ids) on the broker's own
# process, all started on the previous release (bin/turbinesql-prev, see
# build-prev) and upgraded to bin/turbinesql one at a time (clean stop,
# restart on the new binary, wait until it owns tasks again) while input
# flows; 400k events, exactly-once; 3 more faults of one node at a time
# (SIGKILL, a third clean SIGTERM), half the SIGKILLs kept down until their
# tasks moved (failover measured), some restarts on an emptied data dir
# (restore from the changelog); at the end FLUSH on every node; every pane
# read read_committed, exactly once.
audit-cluster: build build-prev
	./bin/turbinesql audit -nodes 3 -upgrade-from bin/turbinesql-prev -events 400000 -rate 3000 -kills 3 -sigterm 0.3 $(CHAOSFLAGS)

# build-prev: the previous release (the commit ci/prev/release names, so
# no tag is needed) built into bin/turbinesql-prev from that commit's tree;
# fails with a clear message when a shallow clone lacks the commit.
.PHONY: build-prev
build-prev:
	GO=$(GO) bash ci/prev/build.sh

# soak: 1M events and 50 SIGKILLs under exactly-once, on the embedded
# broker's own process and then on Apache Kafka (ci/kafka; needs java, mvn).
soak: build
	./bin/turbinesql audit -events 1000000 -kills 50 -broker-restarts 2 $(CHAOSFLAGS)
	GO=$(GO) bash ci/kafka/run.sh soak

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin turbinesql-data
