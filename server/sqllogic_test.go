package server

import (
	"context"
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
			} else {
				t.Parallel()
			}
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

func startTestServer(t *testing.T, dir string) *Server {
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
