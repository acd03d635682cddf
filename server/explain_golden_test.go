package server

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/turbinesql/turbinesql/sql"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/explain/*.out from the current EXPLAIN output")

// TestExplainGolden runs each testdata/explain/*.sql (statements that set
// up sources, then one EXPLAIN) against a server with app id "golden" and
// compares the plan with the .out file next to it: one file per planner
// rule and choice. go test ./server -run TestExplainGolden -update
// rewrites the .out files.
func TestExplainGolden(t *testing.T) {
	parallel(t)
	files, err := filepath.Glob("../testdata/explain/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no explain files: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".sql"), func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			stmts := sql.Split(string(src))
			if len(stmts) == 0 {
				t.Fatalf("no statements in %s", f)
			}
			srv := startGoldenServer(t)
			defer srv.Close()
			conn := connect(ctx, t, srv)
			defer conn.Close(ctx)
			for _, st := range stmts[:len(stmts)-1] {
				if _, err := conn.Exec(ctx, st); err != nil {
					t.Fatalf("%s: %v", st, err)
				}
			}
			rows, err := conn.Query(ctx, stmts[len(stmts)-1])
			if err != nil {
				t.Fatal(err)
			}
			var got strings.Builder
			for rows.Next() {
				var line string
				if err := rows.Scan(&line); err != nil {
					t.Fatal(err)
				}
				got.WriteString(line + "\n")
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			golden := strings.TrimSuffix(f, ".sql") + ".out"
			if *updateGolden {
				if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got.String() != string(want) {
				t.Errorf("EXPLAIN differs from %s:\n--- got\n%s--- want\n%s", golden, got.String(), want)
			}
		})
	}
}

func startGoldenServer(t *testing.T) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := Start(ctx, Config{DataDir: t.TempDir(), PGAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", KafkaAddr: "127.0.0.1:0",
		AppID: "golden", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	return srv
}
