#!/usr/bin/env bash
# `make test-kafka`: the tests that need a real Apache Kafka.
#
# Fetches Kafka (broker + Java client) from Maven Central with the pom beside
# this script (cached in ~/.m2), formats a single-node KRaft broker+controller
# on loopback ports in a temporary directory, starts it, waits until it can
# create a topic, then runs
#   1. ci/kafka/placement_test.go: placement agreement with the Java client
#      (records the Java producer places vs TurbineSQL's murmur2, and records
#      TurbineSQL's INSERT places vs the Java client's partitioner);
#   2. the sqllogictest suite (server.TestSQLLogic) and the server tests of
#      hops, keyed output and recovery against that broker.
# The broker is stopped and its directory removed on exit. A broker that does
# not start fails the run with the tail of its log: never a silent skip.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
HERE=$ROOT/ci/kafka
GO=${GO:-go}

for tool in java mvn "$GO"; do
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

# 2. A single-node KRaft cluster on two free loopback ports.
WORK=$(mktemp -d "${TMPDIR:-/tmp}/turbinesql-kafka.XXXXXX")
LOG=$WORK/broker.log
BROKER_PID=
cleanup() {
  rc=$?
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
# start_broker picks ports, formats a fresh data dir and starts the broker;
# it fails when the broker does not become ready.
start_broker() {
rm -rf "$WORK/data"
PORT=${KAFKA_PORT:-$(free_port)}
CPORT=$(free_port "$PORT")
BROKERS=127.0.0.1:$PORT

cat >"$WORK/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CPORT
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CPORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
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
CLUSTER_ID=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
echo "test-kafka: formatting KRaft storage (cluster $CLUSTER_ID) in $WORK/data"
if ! java "${JAVA_OPTS[@]}" -cp "$LIB/*" kafka.tools.StorageTool format \
    -t "$CLUSTER_ID" -c "$WORK/server.properties" >"$LOG" 2>&1; then
  echo "test-kafka: kafka.tools.StorageTool format failed" >&2
  exit 1
fi

echo "test-kafka: starting kafka.Kafka on $BROKERS (controller on 127.0.0.1:$CPORT)"
java "${JAVA_OPTS[@]}" -cp "$LIB/*" kafka.Kafka "$WORK/server.properties" >>"$LOG" 2>&1 &
BROKER_PID=$!
"$GO" run ./ci/kafka/kafkaready -brokers "$BROKERS" -pid "$BROKER_PID" -timeout 120s
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

# 3. The tests.
export TURBINE_TEST_BROKERS=$BROKERS KAFKA_CI_CLASSPATH="$WORK/classes:$LIB/*"
start=$(date +%s)
"$GO" test -tags realkafka -count=1 -v -timeout 10m ./ci/kafka/
mid=$(date +%s)
"$GO" test -count=1 -v -timeout 20m \
  -run 'TestSQLLogic|TestMessageKeyPlacement|TestCombineLatePartial|TestInternalTopicCountMismatch|TestRecoveredDueTimers|TestCostChoiceSurvivesRestart' ./server/
end=$(date +%s)
echo "test-kafka: Kafka $KAFKA_VERSION: placement $((mid - start))s, sqllogictest suite $((end - mid))s"
