package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/turbinesql/turbinesql/internal/slt"
)

// TestSQLLogic runs every testdata/sqllogic/*.slt file against a real
// server (embedded broker, Pebble on disk, pgwire on a free port), a fresh
// one per file. `restart` stops the server cleanly and starts it again on
// the same data dir. Files using it (or `sleep`) are named *.go.slt: the
// glob runs them here, and `make test-slt-rs` leaves them out.
func TestSQLLogic(t *testing.T) {
	files, err := filepath.Glob("../testdata/sqllogic/*.slt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no slt files found: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if testBrokers() != "" {
				// One shared cluster: files run in turn (sharedbroker_test.go).
				isolateTopics(t)
			}
			parallel(t)
			runSLTFile(t, f)
		})
	}
}

// TestSQLLogicPortable keeps the files sqllogictest-rs runs (all but
// *.go.slt; make test-slt-rs) within what it reads the same way: no
// restart directive, and no expected error that relies on pgx's error text.
// sqllogictest-rs matches the regex against "db error: ERROR: <message>",
// without the code, and reads `statement error (42P01)` as a SQLSTATE check
// (which our runner's regex also finds in "(SQLSTATE 42P01)").
func TestSQLLogicPortable(t *testing.T) {
	files, err := filepath.Glob("../testdata/sqllogic/*.slt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no slt files found: %v", err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, ".go.slt") {
			continue
		}
		recs, err := slt.ParseFile(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		for _, r := range recs {
			switch {
			case r.Kind == slt.KindRestart:
				t.Errorf("%s:%d: restart is our Go runner's own directive: name the file *.go.slt", f, r.Line)
			case (r.Kind == slt.KindStatementError || r.Kind == slt.KindQueryError) && strings.Contains(r.ErrorRegex, "SQLSTATE"):
				t.Errorf("%s:%d: sqllogictest-rs never sees pgx's (SQLSTATE ...) suffix: check the code with "+
					"`statement error (CODE)` and the message with a second record", f, r.Line)
			}
		}
	}
}

func startTestServer(t *testing.T, dir string, mods ...func(*Config)) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("TURBINE_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	cfg := Config{DataDir: dir, PGAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", KafkaAddr: "127.0.0.1:0", AppID: "slt", Logger: log,
		MetadataInterval: 500 * time.Millisecond}
	if b := testBrokers(); b != "" {
		// A real cluster shared by every file: each file gets its own app
		// id and its topics are deleted when it ends (sharedbroker_test.go).
		cfg.Brokers = strings.Split(b, ",")
		cfg.Kafka = testKafkaConn()
		cfg.AppID = sharedAppID(t)
	}
	for _, m := range mods {
		m(&cfg)
	}
	srv, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	return srv
}

func connect(ctx context.Context, t *testing.T, srv *Server) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, "postgres://turbine@"+srv.PGAddr()+"/turbine?sslmode=disable")
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	return conn
}

func runSLTFile(t *testing.T, path string) {
	dir := t.TempDir()
	srv := startTestServer(t, dir)
	defer func() { srv.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conn := connect(ctx, t, srv)
	defer conn.Close(ctx)
	opts := slt.Options{
		Engine:  "turbinesql",
		Timeout: 60 * time.Second,
		Restart: func(ctx context.Context) (*pgx.Conn, error) {
			srv.Close()
			srv = startTestServer(t, dir)
			return pgx.Connect(ctx, "postgres://turbine@"+srv.PGAddr()+"/turbine?sslmode=disable")
		},
	}
	if err := slt.RunFile(ctx, conn, path, opts); err != nil {
		t.Fatal(err)
	}
}

// execAll runs statements in order, failing the test at the first error.
func execAll(ctx context.Context, t *testing.T, conn *pgx.Conn, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// testSession starts a server on a fresh data dir (the shared broker's
// topics isolated when there is one) and connects to it; both are closed
// when the test ends.
func testSession(t *testing.T, timeout time.Duration) (context.Context, *Server, *pgx.Conn) {
	t.Helper()
	if testBrokers() != "" {
		isolateTopics(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	srv := startTestServer(t, t.TempDir())
	conn := connect(ctx, t, srv)
	t.Cleanup(func() {
		conn.Close(context.Background())
		srv.Close()
		cancel()
	})
	return ctx, srv, conn
}

// keyCounts runs a query of (text, bigint) rows and renders them as
// "k=n ..." for comparison.
func keyCounts(ctx context.Context, t *testing.T, conn *pgx.Conn, q string) string {
	t.Helper()
	rows, err := conn.Query(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s=%d", k, n))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(got, " ")
}

// parallel runs t beside the package's other parallel tests when each
// test brings its own embedded broker: most of a server test's time is
// spent waiting (commit intervals, session timeouts, restarts), not on
// the CPU. On one shared cluster (TURBINE_TEST_BROKERS) tests run in
// turn, each under its own topics (sharedbroker_test.go). Tests that
// time themselves (Close within its budget, the catalog's evaluator
// being linear, a 300 ms server-wide statement timeout that a loaded
// machine's CREATE SOURCE overran) stay serial. make test runs 4 at a
// time (-parallel 4; Go's default is GOMAXPROCS, 2 here): the server
// package went from 496 s to 211 s.
func parallel(t *testing.T) {
	t.Helper()
	if testBrokers() == "" {
		t.Parallel()
	}
}
