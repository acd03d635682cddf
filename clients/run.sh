#!/usr/bin/env bash
# Client compatibility (`make test-clients`): each real PostgreSQL client
# runs one scripted session against a fresh `turbinesql serve` (its own
# data dir, free ports), and sqllogictest-rs runs every portable
# testdata/sqllogic/*.slt file the same way, one fresh server per file.
#
#   clients/run.sh [psql|pgx|jdbc|python|slt-rs]...   (default: all)
#
# The client sessions log in as an operator would deploy the server: SCRAM-
# SHA-256 (--auth scram, password from TURBINE_PASSWORD) over TLS that the
# server requires (--tls-required), each client verifying the server's
# certificate against a CA this script makes with openssl (verify-full).
# sqllogictest-rs, which speaks plain text only, runs against the loopback
# default (trust, no TLS).
#
# A missing client or a failed session fails the run: nothing is skipped.
# Environment: TURBINESQL (server binary, default bin/turbinesql),
# SQLLOGICTEST (sqllogictest-rs binary, default ~/.cargo/bin/sqllogictest),
# UPDATE_EXPECTED=1 (rewrite clients/psql/expected.* from this run).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

TURBINESQL=${TURBINESQL:-$ROOT/bin/turbinesql}
SQLLOGICTEST=${SQLLOGICTEST:-$HOME/.cargo/bin/sqllogictest}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/turbinesql-clients.XXXXXX")
SERVER_PID=
PGPORT=

cleanup() {
  stop_server
  rm -rf "$WORK"
}
trap cleanup EXIT

# The server's certificate, for 127.0.0.1, signed by a throwaway CA.
TLSDIR=$WORK/tls
mkdir -p "$TLSDIR"
(
  cd "$TLSDIR"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=turbinesql-clients-ca" \
    -keyout ca.key -out ca.pem 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout server.key -out server.csr 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >san.ext
  openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
    -extfile san.ext -out server.pem 2>/dev/null
) || { echo "openssl could not make the test certificates" >&2; exit 1; }
CA=$TLSDIR/ca.pem
PASSWORD=clients-$RANDOM-pw
# Flags of a secured server; TURBINE_PASSWORD is set when it starts.
SECURE=(--auth scram --tls-cert "$TLSDIR/server.pem" --tls-key "$TLSDIR/server.key" --tls-required)

# start_server NAME [FLAGS...]: starts a server on a fresh data dir with
# every port chosen by the kernel, and sets PGPORT from the address it prints.
start_server() {
  local dir=$WORK/$1 addr=
  shift
  mkdir -p "$dir"
  TURBINE_PASSWORD=$PASSWORD "$TURBINESQL" serve --data-dir "$dir/data" --pg-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 \
    --kafka-addr 127.0.0.1:0 "$@" >"$dir/server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 300); do
    addr=$(sed -n 's/^ *pgwire: *\([0-9.]*:[0-9]*\).*/\1/p' "$dir/server.log")
    [ -n "$addr" ] && break
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "server for $1 exited during start-up:" >&2
      cat "$dir/server.log" >&2
      SERVER_PID=
      return 1
    fi
    sleep 0.1
  done
  if [ -z "$addr" ]; then
    echo "server for $1 did not start within 30 s:" >&2
    cat "$dir/server.log" >&2
    return 1
  fi
  PGPORT=${addr##*:}
}

stop_server() {
  if [ -n "$SERVER_PID" ]; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
  fi
}

need() {
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "$1 is required for the $2 session but is not installed${3:+ ($3)}" >&2
    return 1
  fi
}

run_psql() {
  need psql psql "apt-get install postgresql-client" || return 1
  local out=$WORK/psql.out err=$WORK/psql.err
  # No psqlrc, no pager, C locale: the output is compared byte for byte.
  LC_ALL=C PAGER= PGPASSWORD=$PASSWORD PGSSLMODE=verify-full PGSSLROOTCERT=$CA \
    psql -X -P pager=off -h 127.0.0.1 -p "$PGPORT" -U turbine -f clients/psql/session.sql turbine \
    >"$out" 2>"$err" </dev/null || { echo "psql exited $?" >&2; cat "$err" >&2; return 1; }
  if [ "${UPDATE_EXPECTED:-}" = 1 ]; then
    cp "$out" clients/psql/expected.out
    cp "$err" clients/psql/expected.err
  fi
  diff -u clients/psql/expected.out "$out" || { echo "psql: stdout differs from clients/psql/expected.out" >&2; return 1; }
  diff -u clients/psql/expected.err "$err" || { echo "psql: stderr differs from clients/psql/expected.err" >&2; return 1; }
  # The refusals, as psql reports them.
  local refused
  refused=$(PGPASSWORD=wrong PGSSLMODE=verify-full PGSSLROOTCERT=$CA psql -X -h 127.0.0.1 -p "$PGPORT" -U turbine -c 'SELECT 1' turbine 2>&1) &&
    { echo "psql: a wrong password logged in" >&2; return 1; }
  case $refused in *'password authentication failed for user "turbine"'*) ;; *)
    echo "psql: wrong password: unexpected answer: $refused" >&2; return 1 ;; esac
  refused=$(PGPASSWORD=$PASSWORD PGSSLMODE=disable psql -X -h 127.0.0.1 -p "$PGPORT" -U turbine -c 'SELECT 1' turbine 2>&1) &&
    { echo "psql: a plain-text connection got in under --tls-required" >&2; return 1; }
  case $refused in *'accepts only TLS connections'*) ;; *)
    echo "psql: plain text: unexpected answer: $refused" >&2; return 1 ;; esac
  echo "psql: ok (SCRAM over TLS, verify-full; wrong password and plain text refused)"
}

run_pgx() {
  need go pgx || return 1
  go run ./clients/pgx -dsn "postgres://turbine:$PASSWORD@127.0.0.1:$PGPORT/turbine?sslmode=verify-full&sslrootcert=$CA"
}

run_jdbc() {
  need mvn jdbc "Maven 3.8" || return 1
  need java jdbc "JDK 17" || return 1
  # Maven 3.8 writes colour resets even in batch mode: strip them (the
  # pipeline keeps mvn's status, pipefail is set).
  mvn -B -q -Dstyle.color=never -f clients/jdbc/pom.xml compile exec:java \
    -Dexec.args="jdbc:postgresql://127.0.0.1:$PGPORT/turbine?user=turbine&password=$PASSWORD&sslmode=verify-full&sslrootcert=$CA" \
    2>&1 | sed 's/\x1b\[[0-9;]*m//g'
}

run_python() {
  need python3 python || return 1
  local venv=clients/python/.venv stamp=clients/python/.venv/requirements.txt
  # The virtualenv is made once and remade when requirements.txt changes.
  if ! cmp -s clients/python/requirements.txt "$stamp" 2>/dev/null; then
    rm -rf "$venv"
    python3 -m venv "$venv" || return 1
    "$venv/bin/pip" install -q --disable-pip-version-check -r clients/python/requirements.txt || return 1
    cp clients/python/requirements.txt "$stamp" || return 1
  fi
  "$venv/bin/python" clients/python/session.py \
    "host=127.0.0.1 port=$PGPORT user=turbine dbname=turbine password=$PASSWORD sslmode=verify-full sslrootcert=$CA"
}

# run_slt FILE: sqllogictest-rs over the simple query protocol.
run_slt() {
  RUST_BACKTRACE=0 "$SQLLOGICTEST" --color never --engine postgres --host 127.0.0.1 --port "$PGPORT" \
    --db turbine --user turbine "$1"
}

passed=0
failed=0
failures=()

# session NAME CMD...: one fresh server, one client session. Client
# sessions get a secured server (SECURE), sqllogictest-rs the default.
session() {
  local name=$1 start=$SECONDS flags=("${SECURE[@]}")
  shift
  case $name in slt-rs*) flags=() ;; esac
  echo "--- $name"
  if start_server "$name" ${flags[@]+"${flags[@]}"} && "$@"; then
    passed=$((passed + 1))
    echo "--- $name: ok ($((SECONDS - start)) s)"
  else
    failed=$((failed + 1))
    failures+=("$name")
    echo "--- $name: FAILED ($((SECONDS - start)) s); server log: " >&2
    tail -n 20 "$WORK/$name/server.log" >&2 2>/dev/null || true
  fi
  stop_server
}

[ -x "$TURBINESQL" ] || { echo "$TURBINESQL not found: run make build" >&2; exit 1; }

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(psql pgx jdbc python slt-rs)
for t in "${targets[@]}"; do
  case $t in
    psql | pgx | jdbc | python) session "$t" "run_$t" ;;
    slt-rs)
      if [ ! -x "$SQLLOGICTEST" ]; then
        echo "sqllogictest-rs not found at $SQLLOGICTEST: run make slt-rs" >&2
        failed=$((failed + 1))
        failures+=(slt-rs)
        continue
      fi
      # Files using the Go runner's own directives (restart, sleep) are
      # named *.go.slt and run by go test only.
      for f in testdata/sqllogic/*.slt; do
        case $f in *.go.slt) continue ;; esac
        session "slt-rs $(basename "$f")" run_slt "$f"
      done
      ;;
    *)
      echo "unknown client $t (psql, pgx, jdbc, python, slt-rs)" >&2
      exit 2
      ;;
  esac
done

echo "clients: $passed passed, $failed failed"
if [ "$failed" -gt 0 ]; then
  echo "failed: ${failures[*]}" >&2
  exit 1
fi
