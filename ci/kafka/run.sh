#!/usr/bin/env bash
# `make test-kafka`: the tests that need a real Apache Kafka.
#
# Fetches Kafka (broker + Java client) from Maven Central with the pom beside
# this script (cached in ~/.m2), formats a single-node KRaft broker+controller
# on loopback ports in a temporary directory, starts it, waits until it can
# create a topic, then runs
#   1. ci/kafka/placement_test.go: placement agreement with the Java client
#      (records the Java producer places vs TurbineSQL's murmur2, and records
#      TurbineSQL's INSERT places vs the Java client's partitioner),
#      and ci/kafka/stable_test.go: a task's committed offset reads as
#      stable while another partition's dead holder left its transaction
#      open (Kafka answers per partition; kfake for the whole group),
#      and ci/kafka/grow_test.go: processes growing one topic at once all
#      succeed (Kafka refuses all but the first; kfake takes them all);
#   2. the sqllogictest suite (server.TestSQLLogic) and the server tests of
#      hops, keyed output and recovery against that broker, through its
#      SASL_SSL listener (SCRAM-SHA-256 user, certificate signed by a CA this
#      script makes with openssl and checks with keytool);
#   3. a session of the built binary (psql over pgwire) with Kafka reached
#      through the same SASL_SSL listener, configured by flags and env.
#   4. the exactly-once crash audit (turbinesql audit) against that broker:
#      every plan's streams, SIGKILLs and crashes between a transaction's
#      commit and the state's write, outputs read read_committed;
#   5. the same audit with three server processes sharing the app.
# Step 2 also runs the rescale tool's central tests (package rescale: two
# servers, 4 -> 8, with the app stopped, and with the stream stopped by
# ALTER STREAM while the app runs) on that broker, over PLAINTEXT.
# `run.sh soak` (make soak) starts the broker and runs only a long audit:
# 1M events and 50 SIGKILLs. `run.sh rescale` runs only the rescale tests.
# The broker is stopped and its directory removed on exit. A broker that does
# not start fails the run with the tail of its log: never a silent skip.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
HERE=$ROOT/ci/kafka
GO=${GO:-go}

for tool in java mvn openssl keytool psql "$GO"; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "test-kafka: $tool is required" >&2
    exit 1
  fi
done

# 1. Kafka's jars.
echo "test-kafka: fetching Kafka with Maven (ci/kafka/pom.xml)"
LIB=$HERE/target/lib
rm -rf "$LIB"
mkdir -p "$HERE/target"
if ! mvn -B -q -f "$HERE/pom.xml" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$LIB" >"$HERE/target/mvn.log" 2>&1; then
  cat "$HERE/target/mvn.log" >&2
  echo "test-kafka: Maven could not fetch Kafka (see above)" >&2
  exit 1
fi
KAFKA_JAR=$(ls "$LIB"/kafka_2.13-*.jar)
KAFKA_VERSION=${KAFKA_JAR##*/kafka_2.13-}
KAFKA_VERSION=${KAFKA_VERSION%.jar}
echo "test-kafka: Apache Kafka $KAFKA_VERSION ($(java -version 2>&1 | head -1))"

# 2. A single-node KRaft cluster on three free loopback ports: PLAINTEXT,
# SASL_SSL and the controller.
WORK=$(mktemp -d "${TMPDIR:-/tmp}/turbinesql-kafka.XXXXXX")
LOG=$WORK/broker.log
# The step running now and its output (tee'd): a failure ends the run with
# them, last, after the broker's log, so the tail of a CI log says what
# failed rather than only what the broker logged meanwhile.
STEP=setup
STEP_OUT=$WORK/step.out
step() {
  STEP=$1
  : >"$STEP_OUT"
}
# logged runs a command of the current step, its output (stdout and
# stderr) both shown and kept for that report; pipefail keeps its status.
logged() {
  "$@" 2>&1 | tee -a "$STEP_OUT"
}
BROKER_PID=
SERVE_PID=
cleanup() {
  rc=$?
  if [ -n "$SERVE_PID" ] && kill -0 "$SERVE_PID" 2>/dev/null; then
    kill "$SERVE_PID" 2>/dev/null || true
    wait "$SERVE_PID" 2>/dev/null || true
  fi
  if [ -n "$BROKER_PID" ] && kill -0 "$BROKER_PID" 2>/dev/null; then
    kill "$BROKER_PID" 2>/dev/null || true
    for _ in $(seq 1 60); do
      kill -0 "$BROKER_PID" 2>/dev/null || break
      sleep 0.5
    done
    kill -9 "$BROKER_PID" 2>/dev/null || true
    wait "$BROKER_PID" 2>/dev/null || true
  fi
  if [ "$rc" -ne 0 ] && [ -f "$LOG" ]; then
    echo "test-kafka: FAILED (exit $rc); first errors in the broker log ($LOG):" >&2
    grep -E '^\[[^]]*\] (ERROR|FATAL)' "$LOG" | head -n 5 >&2 || true
    echo "test-kafka: last lines of the broker log:" >&2
    tail -n 40 "$LOG" >&2 || true
  fi
  if [ "$rc" -ne 0 ] && [ -s "$STEP_OUT" ]; then
    echo "test-kafka: the last lines of step $STEP:" >&2
    tail -n 60 "$STEP_OUT" >&2 || true
    # An audit that fails keeps its work dir, the servers' log in it.
    kept=$(sed -n 's/^.*: kept \([^ ]*\) (server.log.*$/\1/p' "$STEP_OUT" | tail -n 1)
    if [ -n "$kept" ]; then
      for f in "$kept"/server*.log; do
        [ -f "$f" ] || continue
        echo "test-kafka: the last errors in $f:" >&2
        grep -E 'level=(ERROR|WARN)|"level":"(ERROR|WARN)"|panic' "$f" | tail -n 20 >&2 || true
      done
    fi
  fi
  if [ "$rc" -ne 0 ]; then
    echo "test-kafka: FAILED in step: $STEP (exit $rc)" >&2
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# Ports below Linux's ephemeral range (ip_local_port_range starts at 32768),
# so no outgoing connection holds the one picked; a bind race that remains
# is retried below.
free_port() {
  local p
  for _ in $(seq 1 200); do
    p=$((12000 + RANDOM % 20000))
    if port_free "$p" && [ "$p" != "${1:-}" ]; then
      echo "$p"
      return
    fi
  done
  echo "test-kafka: no free loopback port found" >&2
  return 1
}
# A throwaway CA and a broker certificate for 127.0.0.1 it signed, in a
# PKCS12 keystore for the SASL_SSL listener.
TLSDIR=$WORK/tls
KS_PASS=$(head -c 12 /dev/urandom | base64 | tr -d '/+=')
mkdir -p "$TLSDIR"
(
  cd "$TLSDIR"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=turbinesql-ci-ca" \
    -keyout ca.key -out ca.pem 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout broker.key -out broker.csr 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >san.ext
  openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
    -extfile san.ext -out broker.pem 2>/dev/null
  openssl pkcs12 -export -in broker.pem -inkey broker.key -certfile ca.pem -name broker \
    -out broker.p12 -passout "pass:$KS_PASS"
  keytool -list -keystore broker.p12 -storetype PKCS12 -storepass "$KS_PASS" >/dev/null
)
echo "test-kafka: made a CA and a broker certificate for the SASL_SSL listener in $TLSDIR"
SCRAM_USER=turbinesql-ci
SCRAM_PASS=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')

# start_broker picks ports, formats a fresh data dir and starts the broker;
# it fails when the broker does not become ready.
start_broker() {
rm -rf "$WORK/data"
PORT=${KAFKA_PORT:-$(free_port)}
CPORT=$(free_port "$PORT")
SPORT=$(free_port "$CPORT")
BROKERS=127.0.0.1:$PORT
SASL_BROKERS=127.0.0.1:$SPORT

cat >"$WORK/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CPORT
listeners=PLAINTEXT://127.0.0.1:$PORT,SASL_SSL://127.0.0.1:$SPORT,CONTROLLER://127.0.0.1:$CPORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT,SASL_SSL://127.0.0.1:$SPORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-256
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PKCS12
ssl.keystore.location=$TLSDIR/broker.p12
ssl.keystore.password=$KS_PASS
ssl.key.password=$KS_PASS
log.dirs=$WORK/data
num.partitions=1
default.replication.factor=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
min.insync.replicas=1
EOF
# Warnings and errors, plus the start-up milestones; the tail of this log is
# printed if anything fails.
cat >"$WORK/log4j2.properties" <<'EOF'
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
logger.raft.name = kafka.server.KafkaRaftServer
logger.raft.level = INFO
logger.broker.name = kafka.server.BrokerServer
logger.broker.level = INFO
logger.controller.name = kafka.server.ControllerServer
logger.controller.level = INFO
EOF

JAVA_OPTS=(-Xms256m -Xmx512m -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true
  "-Dlog4j2.configurationFile=$WORK/log4j2.properties")
# A random KRaft cluster id (16 bytes, base64url). One that starts with '-'
# reads as an option to the storage tool (as Kafka's own Uuid.randomUuid
# knows, which never makes one): draw again.
CLUSTER_ID=-
while [ "${CLUSTER_ID#-}" != "$CLUSTER_ID" ]; do
  CLUSTER_ID=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
done
echo "test-kafka: formatting KRaft storage (cluster $CLUSTER_ID) in $WORK/data"
if ! java "${JAVA_OPTS[@]}" -cp "$LIB/*" kafka.tools.StorageTool format \
    -t "$CLUSTER_ID" -c "$WORK/server.properties" >"$LOG" 2>&1; then
  echo "test-kafka: kafka.tools.StorageTool format failed" >&2
  exit 1
fi

echo "test-kafka: starting kafka.Kafka on $BROKERS (controller on 127.0.0.1:$CPORT)"
java "${JAVA_OPTS[@]}" -cp "$LIB/*" kafka.Kafka "$WORK/server.properties" >>"$LOG" 2>&1 &
BROKER_PID=$!
KAFKAREADY_SCRAM_PASSWORD=$SCRAM_PASS "$GO" run ./ci/kafka/kafkaready -brokers "$BROKERS" -pid "$BROKER_PID" -timeout 120s \
  -add-scram-user "$SCRAM_USER" || return 1
# The credential reaches the SASL listener through the metadata log: wait
# until a client gets in the way the engine will.
KAFKAREADY_SASL_PASSWORD=$SCRAM_PASS "$GO" run ./ci/kafka/kafkaready -brokers "$SASL_BROKERS" -pid "$BROKER_PID" -timeout 60s \
  -sasl-mechanism SCRAM-SHA-256 -sasl-username "$SCRAM_USER" -tls-ca "$TLSDIR/ca.pem"
}


mkdir -p "$WORK/classes"
javac -d "$WORK/classes" -cp "$LIB/*" "$HERE/Placement.java"

# Another process can take a picked port between the check and the bind:
# then the broker exits with "Address already in use", and it is started
# again on other ports. Any other failure ends the run.
for attempt in 1 2 3; do
  if start_broker; then
    break
  fi
  if [ "$attempt" -lt 3 ] && grep -q "Address already in use" "$LOG"; then
    echo "test-kafka: a port was taken while the broker started; retrying on other ports" >&2
    wait "$BROKER_PID" 2>/dev/null || true
    BROKER_PID=
    continue
  fi
  echo "test-kafka: the Kafka broker did not become ready" >&2
  exit 1
done

# The exactly-once audit: the built binary is the server it kills, the
# broker is this one (PLAINTEXT), and the audit's topics and app id are its
# own.
audit() {
  "$GO" build -o "$WORK/turbinesql" ./cmd/turbinesql
  logged "$WORK/turbinesql" audit -brokers "$BROKERS" "$@"
}
rescale_tests() {
  step "rescale tests"
  logged env TURBINE_TEST_BROKERS="$BROKERS" "$GO" test -count=1 -v -timeout 10m -run 'TestRescaleCentral|TestRescaleStoppedStream' ./rescale/
}
if [ "${1:-}" = rescale ]; then
  rescale_tests
  exit 0
fi
if [ "${1:-}" = soak ]; then
  start=$(date +%s)
  step "soak audit"
  audit -events 1000000 -kills 50
  echo "test-kafka: soak audit on Kafka $KAFKA_VERSION took $(($(date +%s) - start))s"
  exit 0
fi

# 3. The tests. Placement compares with the Java client over PLAINTEXT;
# the engine's tests reach Kafka through the SASL_SSL listener.
export KAFKA_CI_CLASSPATH="$WORK/classes:$LIB/*"
start=$(date +%s)
step "placement tests (ci/kafka)"
logged env TURBINE_TEST_BROKERS="$BROKERS" "$GO" test -tags realkafka -count=1 -v -timeout 10m ./ci/kafka/
rescale_tests
mid=$(date +%s)
step "engine tests over SASL_SSL (server)"
logged env TURBINE_TEST_BROKERS="$SASL_BROKERS" TURBINE_TEST_KAFKA_SASL_MECHANISM=SCRAM-SHA-256 \
  TURBINE_TEST_KAFKA_SASL_USERNAME="$SCRAM_USER" TURBINE_TEST_KAFKA_SASL_PASSWORD="$SCRAM_PASS" \
  TURBINE_TEST_KAFKA_TLS_CA="$TLSDIR/ca.pem" \
  "$GO" test -count=1 -v -timeout 20m \
  -run 'TestSQLLogic|TestMessageKeyPlacement|TestCombineLatePartial|TestInternalTopicCountMismatch|TestRecoveredDueTimers|TestCostChoiceSurvivesRestart|TestExactlyOnceCatchesUpAfterStateLag|TestFencedTaskRejoins|TestExactlyOnceFencedHopRejoins' ./server/
end=$(date +%s)

# 4. The binary as an operator runs it: Kafka over SASL_SSL from flags and
# TURBINE_KAFKA_SASL_PASSWORD, SQL clients with SCRAM from TURBINE_PASSWORD.
step "binary session over SASL_SSL"
"$GO" build -o "$WORK/turbinesql" ./cmd/turbinesql
PG_PORT=$(free_port)
HTTP_PORT=$(free_port "$PG_PORT")
TURBINE_KAFKA_SASL_PASSWORD=$SCRAM_PASS TURBINE_PASSWORD=ci-admin-pw \
"$WORK/turbinesql" serve --brokers "$SASL_BROKERS" --app-id "ci-serve-$$" \
  --kafka-sasl-mechanism SCRAM-SHA-256 --kafka-sasl-username "$SCRAM_USER" --kafka-tls-ca "$TLSDIR/ca.pem" \
  --auth scram --pg-addr "127.0.0.1:$PG_PORT" --http-addr "127.0.0.1:$HTTP_PORT" \
  --data-dir "$WORK/serve" --log-format json >"$WORK/serve.out" 2>"$WORK/serve.log" &
SERVE_PID=$!
for _ in $(seq 1 120); do
  if curl -sf "http://127.0.0.1:$HTTP_PORT/readyz" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$SERVE_PID" 2>/dev/null; then
    cat "$WORK/serve.log" >&2
    echo "test-kafka: turbinesql serve exited" >&2
    exit 1
  fi
  sleep 0.5
done
got=$(PGPASSWORD=ci-admin-pw psql -X -q -A -t -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U turbine turbine <<'SQL'
CREATE SOURCE ci_ev (k TEXT, n BIGINT) WITH (topic = 'ci_ev', partitions = 2, partition_key = 'k');
CREATE STREAM ci_big WITH (topic = 'ci_big') AS SELECT k, n FROM ci_ev WHERE n > 1;
INSERT INTO ci_ev VALUES ('a', 1), ('a', 2), ('b', 5);
FLUSH;
SELECT k, n FROM ci_big ORDER BY k, n;
SQL
)
want=$'a|2\nb|5'
if [ "$got" != "$want" ]; then
  echo "test-kafka: session over SASL_SSL returned [$got], want [$want]; server log:" >&2
  tail -n 40 "$WORK/serve.log" >&2
  exit 1
fi
if PGPASSWORD=wrong psql -X -q -h 127.0.0.1 -p "$PG_PORT" -U turbine turbine -c 'SELECT 1' >/dev/null 2>&1; then
  echo "test-kafka: a wrong password logged in" >&2
  exit 1
fi
kill "$SERVE_PID"
wait "$SERVE_PID" || true
SERVE_PID=
fin=$(date +%s)

# 5. Exactly-once on a real broker: kills, crashes in the narrowest window,
# every pane once.
step "exactly-once audit"
audit -events 60000 -kills 5
aud=$(date +%s)

# 6. Three server processes sharing the app on this broker (issue 14's
# scale-out): faults of one node at a time, failover through the stages'
# consumer groups, restores from the changelog topics, FLUSH on every node
# at the end, every pane once and exact, read read_committed.
step "three-node audit"
audit -nodes 3 -events 400000 -rate 3000 -kills 4
clu=$(date +%s)
echo "test-kafka: Kafka $KAFKA_VERSION: placement and rescale $((mid - start))s, engine tests over SASL_SSL $((end - mid))s, binary session over SASL_SSL $((fin - end))s, exactly-once audit $((aud - fin))s, three-node audit $((clu - aud))s"
