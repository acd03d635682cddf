package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// childArgsEnv makes the test binary run the command line it holds (JSON)
// instead of the tests: a real process to send SIGTERM to, without
// building the binary.
const childArgsEnv = "TURBINESQL_TEST_CHILD_ARGS"

func TestMain(m *testing.M) {
	if js := os.Getenv(childArgsEnv); js != "" {
		var args []string
		if err := json.Unmarshal([]byte(js), &args); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(run(args, os.Stdout, os.Stderr, os.LookupEnv))
	}
	os.Exit(m.Run())
}

// TestSIGTERMWithStatementsInFlight: SIGTERM stops the server within 10 s
// while statements run (a pg_sleep of ten minutes, a stream, an idle
// client); the running statement's client is told 57P01, as PostgreSQL
// tells it at shutdown, and the exit code is 0.
func TestSIGTERMWithStatementsInFlight(t *testing.T) {
	args, _ := json.Marshal([]string{"serve", "--data-dir", t.TempDir(), "--pg-addr", "127.0.0.1:0",
		"--http-addr", "127.0.0.1:0", "--kafka-addr", "127.0.0.1:0", "--log-level", "warn"})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childArgsEnv+"="+string(args))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	addrRe := regexp.MustCompile(`pgwire:\s+(\S+)`)
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := addrRe.FindStringSubmatch(sc.Text()); m != nil {
				addrc <- m[1]
			}
		}
		exited <- cmd.Wait()
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-exited:
		t.Fatalf("server exited at start: %v\n%s", err, stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("server did not start\n%s", stderr.String())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	connect := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, "postgres://turbine@"+addr+"/turbine?sslmode=disable")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	admin := connect()
	for _, q := range []string{
		"CREATE SOURCE clicks (user_id TEXT, n BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH (topic = 'clicks', partitions = 2)",
		"CREATE STREAM per_user WITH (topic = 'per_user') AS SELECT user_id, COUNT(*) AS c FROM clicks GROUP BY user_id, TUMBLE(ts, INTERVAL '1' MINUTE)",
		"INSERT INTO clicks VALUES ('a', 1, TIMESTAMP '2026-01-01 00:00:01')",
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	sleeper := connect()
	slept := make(chan error, 1)
	go func() {
		_, err := sleeper.Exec(context.Background(), "SELECT pg_sleep(600)")
		slept <- err
	}()
	// Give pg_sleep a moment to be running, and check it is.
	time.Sleep(500 * time.Millisecond)
	select {
	case err := <-slept:
		t.Fatalf("pg_sleep(600) returned early: %v", err)
	default:
	}

	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		took := time.Since(start)
		t.Logf("SIGTERM to exit: %v", took)
		if err != nil {
			t.Errorf("exit: %v\n%s", err, stderr.String())
		}
		if took > 10*time.Second {
			t.Errorf("shutdown took %v, want under 10 s", took)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("server still running 30 s after SIGTERM\n%s", stderr.String())
	}
	err = <-slept
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "57P01" || pe.Message != "terminating connection due to administrator command" {
		t.Errorf("the sleeping client got %v, want 57P01 terminating connection due to administrator command", err)
	}
}
