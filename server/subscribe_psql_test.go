package server

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/turbinesql/turbinesql/internal/testenv"
)

// TestSubscribePsql runs COPY (SUBSCRIBE ...) TO STDOUT in psql as a user
// would: rows print as they are committed, and Ctrl-C (SIGINT, which makes
// psql send a CancelRequest) ends it with PostgreSQL's cancel message.
func TestSubscribePsql(t *testing.T) {
	psql := testenv.Psql(t)
	if testBrokers() != "" {
		isolateTopics(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := startTestServer(t, t.TempDir())
	defer srv.Close()
	conn := connect(ctx, t, srv)
	defer conn.Close(ctx)
	for _, q := range []string{
		`CREATE SOURCE ps_in (k TEXT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ps_in', partitions = 1)`,
		`CREATE STREAM ps_rows AS SELECT k, v, ts FROM ps_in WHERE v > 0`,
		`INSERT INTO ps_in VALUES ('x', 1, TIMESTAMP '2026-01-01 00:00:00'), ('y', 0, TIMESTAMP '2026-01-01 00:00:01')`,
		`FLUSH`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	host, port, _ := strings.Cut(srv.PGAddr(), ":")
	// psql writes COPY rows with stdio, which a terminal gets line by
	// line but a pipe only in blocks: stdbuf gives the pipe lines, as a
	// user at a terminal sees them.
	stdbuf, err := exec.LookPath("stdbuf")
	if err != nil {
		if os.Getenv("CI_REQUIRE_PSQL") == "1" {
			t.Fatal("stdbuf (coreutils) required with psql (CI_REQUIRE_PSQL=1) but not found")
		}
		t.Skip("stdbuf (coreutils) not on PATH: it is in Debian's coreutils")
	}
	cmd := exec.CommandContext(ctx, stdbuf, "-oL", psql, "-X", "-h", host, "-p", port, "-U", "turbine", "-d", "turbine",
		"-c", "COPY (SUBSCRIBE TO ps_rows) TO STDOUT")
	cmd.Env = append(os.Environ(), "PGCONNECT_TIMEOUT=10")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	next := func() string {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("psql ended early: %v", lines.Err())
		}
		return lines.Text()
	}
	if got := next(); got != "x\t1\t2026-01-01 00:00:00" {
		t.Fatalf("first line %q", got)
	}
	// A row committed while psql waits shows up without anything else.
	if _, err := conn.Exec(ctx, `INSERT INTO ps_in VALUES ('z', 5, TIMESTAMP '2026-01-01 00:00:02')`); err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "z\t5\t2026-01-01 00:00:02" {
		t.Fatalf("second line %q", got)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait() // stderr is complete once psql has exited
	if !strings.Contains(stderr.String(), "canceling statement due to user request") {
		t.Fatalf("psql after Ctrl-C: %v; stderr: %s", err, stderr.String())
	}
}
