package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/turbinesql/turbinesql/internal/testenv"
	"net"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/turbinesql/turbinesql/sql"
)

// Hostile queries: nesting limits, statement_timeout, cancellation. See
// also pgwire/cancel_test.go (the wire side) and sql/limits_test.go.

func pgErr(err error) *pgconn.PgError {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe
	}
	return nil
}

func wantCode(t *testing.T, what string, err error, code, msg string) {
	t.Helper()
	pe := pgErr(err)
	if pe == nil || pe.Code != code || msg != "" && pe.Message != msg {
		t.Errorf("%s: got %v, want %s %s", what, err, code, msg)
	}
}

func showTimeout(ctx context.Context, t *testing.T, c *pgx.Conn) string {
	t.Helper()
	var v string
	if err := c.QueryRow(ctx, "SHOW statement_timeout").Scan(&v); err != nil {
		t.Fatal(err)
	}
	var cs string
	if err := c.QueryRow(ctx, "SELECT current_setting('statement_timeout')").Scan(&cs); err != nil {
		t.Fatal(err)
	}
	if cs != v {
		t.Errorf("current_setting says %q, SHOW %q", cs, v)
	}
	return v
}

// TestStatementTimeoutSetting: SET statement_timeout in PostgreSQL's
// syntax and units, SHOW in PostgreSQL's format, and statements cancelled
// with 57014 when they run longer; SET LOCAL lasts for its transaction.
func TestStatementTimeoutSetting(t *testing.T) {
	srv := startTestServer(t, t.TempDir())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := connect(ctx, t, srv)
	defer c.Close(ctx)

	if v := showTimeout(ctx, t, c); v != "0" {
		t.Errorf("default statement_timeout %q, want 0", v)
	}
	for _, tc := range []struct{ set, show string }{
		{"'5s'", "5s"}, {"5000", "5s"}, {"1500", "1500ms"}, {"'1.5s'", "1500ms"}, {"'2 min'", "2min"},
		{"'90s'", "90s"}, {"'1h'", "1h"}, {"'2d'", "2d"}, {"'250ms'", "250ms"}, {"0", "0"}, {"'3s'", "3s"},
		{"DEFAULT", "0"},
	} {
		for _, form := range []string{"SET statement_timeout = %s", "SET SESSION statement_timeout TO %s"} {
			q := fmt.Sprintf(form, tc.set)
			if _, err := c.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			if v := showTimeout(ctx, t, c); v != tc.show {
				t.Errorf("%s: SHOW says %q, want %q", q, v, tc.show)
			}
		}
	}
	for _, bad := range []string{"'5x'", "'5S'", "-1", "'abc'", "'99999999999'"} {
		_, err := c.Exec(ctx, "SET statement_timeout = "+bad)
		wantCode(t, bad, err, "22023", "")
		if pe := pgErr(err); pe != nil && !strings.Contains(pe.Message, `parameter "statement_timeout"`) {
			t.Errorf("%s: message %q does not name the parameter", bad, pe.Message)
		}
	}
	if _, err := c.Exec(ctx, "SET statement_timeout = '5x'"); pgErr(err) == nil || !strings.Contains(pgErr(err).Hint, `"min"`) {
		t.Errorf("a bad unit's hint does not list the units: %v", err)
	}

	if _, err := c.Exec(ctx, "SET statement_timeout = '200ms'"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := c.Exec(ctx, "SELECT pg_sleep(5)")
	wantCode(t, "pg_sleep(5) under 200ms", err, "57014", "canceling statement due to statement timeout")
	if took := time.Since(start); took < 200*time.Millisecond || took > 3*time.Second {
		t.Errorf("cancelled after %v, want about 200ms", took)
	}
	if _, err := c.Exec(ctx, "SELECT pg_sleep(0.05)"); err != nil {
		t.Errorf("a statement within the timeout: %v", err)
	}
	// Each statement of a multi-statement query has its own limit, as in
	// PostgreSQL 13 and later: 3 x 120ms passes under 200ms.
	if _, err := c.PgConn().Exec(ctx, "SELECT pg_sleep(0.12); SELECT pg_sleep(0.12); SELECT pg_sleep(0.12)").ReadAll(); err != nil {
		t.Errorf("three statements each within the timeout: %v", err)
	}
	var setting string
	if err := c.QueryRow(ctx, "SELECT setting FROM pg_settings WHERE name = 'statement_timeout'").Scan(&setting); err != nil || setting != "200ms" {
		t.Errorf("pg_settings: %q, %v", setting, err)
	}

	// SET LOCAL: a warning outside a transaction block, the block's own
	// value inside one.
	if _, err := c.Exec(ctx, "RESET statement_timeout"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "SET LOCAL statement_timeout = '100ms'"); err != nil {
		t.Fatal(err)
	}
	if v := showTimeout(ctx, t, c); v != "0" {
		t.Errorf("SET LOCAL outside a transaction took effect: %q", v)
	}
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = '100ms'"); err != nil {
		t.Fatal(err)
	}
	if v := showTimeout(ctx, t, c); v != "100ms" {
		t.Errorf("inside the block: %q", v)
	}
	_, err = tx.Exec(ctx, "SELECT pg_sleep(3)")
	wantCode(t, "pg_sleep(3) under SET LOCAL 100ms", err, "57014", "canceling statement due to statement timeout")
	_ = tx.Rollback(ctx)
	if v := showTimeout(ctx, t, c); v != "0" {
		t.Errorf("SET LOCAL outlived its transaction: %q", v)
	}
}

// TestServerStatementTimeout: Config.StatementTimeout (--statement-timeout)
// is every session's default, which a session may change.
func TestServerStatementTimeout(t *testing.T) {
	srv := startTestServer(t, t.TempDir(), func(c *Config) { c.StatementTimeout = 300 * time.Millisecond })
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := connect(ctx, t, srv)
	defer c.Close(ctx)
	if v := showTimeout(ctx, t, c); v != "300ms" {
		t.Errorf("SHOW statement_timeout %q, want 300ms", v)
	}
	_, err := c.Exec(ctx, "SELECT pg_sleep(5)")
	wantCode(t, "pg_sleep(5)", err, "57014", "canceling statement due to statement timeout")

	// A bounded SELECT reading a topic stops too.
	if _, err := c.Exec(ctx, "CREATE SOURCE ev (k TEXT, n BIGINT) WITH (topic = 'ev', partitions = 2)"); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("INSERT INTO ev VALUES ")
	for i := range 5000 {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "('k%d', %d)", i%97, i)
	}
	if _, err := c.Exec(ctx, "SET statement_timeout = 0"); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := c.Exec(ctx, b.String()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Exec(ctx, "SET statement_timeout = '1ms'"); err != nil {
		t.Fatal(err)
	}
	_, err = c.Exec(ctx, "SELECT k, SUM(n) FROM ev GROUP BY k")
	wantCode(t, "a SELECT over 20000 records under 1ms", err, "57014", "canceling statement due to statement timeout")
	if _, err := c.Exec(ctx, "RESET statement_timeout"); err != nil {
		t.Fatal(err)
	}
	if v := showTimeout(ctx, t, c); v != "300ms" {
		t.Errorf("RESET gave %q, want the server's 300ms", v)
	}
	// The cancelled SELECT changed nothing (without a limit here: how long
	// 20000 records take under -race on a busy machine is not the point).
	if _, err := c.Exec(ctx, "SET statement_timeout = 0"); err != nil {
		t.Fatal(err)
	}
	var count int64
	if err := c.QueryRow(ctx, "SELECT COUNT(*) FROM ev").Scan(&count); err != nil || count != 20000 {
		t.Errorf("after the cancelled SELECT: count %d, %v", count, err)
	}
}

// TestCancelRequestStopsStatement: a CancelRequest (pgx's, as psql's
// Ctrl-C) stops a running statement with 57014, and the session goes on.
func TestCancelRequestStopsStatement(t *testing.T) {
	srv := startTestServer(t, t.TempDir())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := connect(ctx, t, srv)
	defer c.Close(ctx)
	errc := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := c.Exec(context.Background(), "SELECT pg_sleep(30)")
		errc <- err
	}()
	// A cancel that arrives before the statement starts is dropped (it
	// must not hit a later statement): repeat until it lands.
	var err error
	for done := false; !done; {
		if cerr := c.PgConn().CancelRequest(ctx); cerr != nil {
			t.Fatal(cerr)
		}
		select {
		case err = <-errc:
			done = true
		case <-time.After(200 * time.Millisecond):
		}
	}
	wantCode(t, "cancelled pg_sleep(30)", err, "57014", "canceling statement due to user request")
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("cancel took %v", took)
	}
	var one int
	if err := c.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Errorf("after the cancel: %d, %v", one, err)
	}
}

// TestHostileNesting: over pgwire, deep nesting is refused with 54001 in
// little time, whatever its size, and the server stays up; nesting under
// the limit is answered.
func TestHostileNesting(t *testing.T) {
	parallel(t)
	srv := startTestServer(t, t.TempDir())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := connect(ctx, t, srv)
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE SOURCE t (a BIGINT, ts TIMESTAMP) WITH (topic = 't', partitions = 1)"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "INSERT INTO t VALUES (2, TIMESTAMP '2026-01-01 00:00:00')"); err != nil {
		t.Fatal(err)
	}
	paren := func(n int) string { return strings.Repeat("(", n) + "1" + strings.Repeat(")", n) }
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		var v int64
		if err := c.QueryRow(ctx, "SELECT "+paren(sql.MaxNesting-1), mode).Scan(&v); err != nil || v != 1 {
			t.Errorf("%v: %d levels: %d, %v", mode, sql.MaxNesting-1, v, err)
		}
		cases := map[string]string{
			"100k parentheses":   "SELECT " + paren(100_000),
			"1M parentheses":     "SELECT " + paren(1_000_000),
			"deep FROM query":    "SELECT " + strings.Repeat("- ", 20_000) + "a FROM t",
			"deep NOT":           "SELECT " + strings.Repeat("NOT ", 20_000) + "true",
			"deep function call": "SELECT " + strings.Repeat("lower(", 20_000) + "'x'" + strings.Repeat(")", 20_000) + " FROM t",
		}
		if mode == pgx.QueryExecModeSimpleProtocol {
			// Parsed in full before its depth is known: once is enough
			// (seconds under -race). It used to overflow the stack and
			// kill the server.
			cases["2 MB operator chain"] = "SELECT " + strings.Repeat("a+", 1_000_000) + "a FROM t"
		}
		for name, q := range cases {
			start := time.Now()
			_, err := c.Exec(ctx, q, mode)
			wantCode(t, fmt.Sprintf("%v %s", mode, name), err, sql.CodeStatementTooComplex, "")
			if pe := pgErr(err); pe != nil && !strings.Contains(pe.Message, "statement too complex") {
				t.Errorf("%s: message %q", name, pe.Message)
			}
			t.Logf("%v %s (%d bytes): refused in %v", mode, name, len(q), time.Since(start))
		}
	}
	var v int64
	if err := c.QueryRow(ctx, "SELECT "+strings.Repeat("a + ", 5000)+"a FROM t").Scan(&v); err != nil || v != 2*5001 {
		t.Errorf("a 5000-operator chain: %d, %v", v, err)
	}
}

// TestCatalogEvaluatorLinear: SELECT without FROM costs time linear in its
// size however it nests: a query nested MaxNesting levels deep, or a chain
// of as many || or OR, costs a small multiple of a flat IN list of as many
// terms. The catalog-query evaluator that used to answer these re-scanned
// every parenthesised group at each level (10k levels took half a second,
// over 100 times the list; 100k levels 31 s) and copied the growing string
// at every || (quadratic).
func TestCatalogEvaluatorLinear(t *testing.T) {
	s := catalogSession(t)
	ctx := context.Background()
	// The collector scans the whole (deep) stack at every cycle, and a
	// small test heap cycles often: that cost is the runtime's, not the
	// evaluator's, and is left out.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	run := func(q string) time.Duration {
		best := time.Hour
		for range 5 {
			start := time.Now()
			res, err := s.Execute(ctx, q, nil)
			if err != nil || len(res.Rows) != 1 {
				t.Fatalf("%.40s...: %v", q, err)
			}
			best = min(best, time.Since(start))
		}
		return best
	}
	list := func(n int) string { return "SELECT 1 IN (" + strings.Repeat("1, ", n) + "1)" }
	n := sql.MaxNesting
	for name, tc := range map[string]struct {
		q     string
		terms int
	}{
		"parentheses": {"SELECT " + strings.Repeat("(", n) + "1" + strings.Repeat(")", n), n},
		"CASE":        {"SELECT " + strings.Repeat("CASE WHEN true THEN ", n/2) + "1" + strings.Repeat(" END", n/2), n},
		"NOT":         {"SELECT " + strings.Repeat("NOT (", n/2) + "true" + strings.Repeat(")", n/2), n},
		"calls":       {"SELECT " + strings.Repeat("abs(", n) + "1" + strings.Repeat(")", n), n},
		"|| chain":    {"SELECT " + strings.Repeat("'a' || ", n-1) + "'a'", n},
		"OR chain":    {"SELECT " + strings.Repeat("false OR ", n-1) + "true", n},
	} {
		q, flat := run(tc.q), run(list(tc.terms))
		ratio := float64(q) / float64(flat)
		t.Logf("%s: %v, an IN list of %d: %v (%.1fx)", name, q, tc.terms, flat, ratio)
		if ratio > 40 {
			t.Errorf("%s cost %.1fx an IN list of as many terms: not linear", name, ratio)
		}
	}
}

// TestPsqlStatementTimeout: what a psql user sees.
func TestPsqlStatementTimeout(t *testing.T) {
	psql := testenv.Psql(t)
	srv := startTestServer(t, t.TempDir())
	defer srv.Close()
	host, port, _ := net.SplitHostPort(srv.PGAddr())
	cmd := exec.Command(psql, "-X", "-w", "-h", host, "-p", port, "-U", "turbine", "-At",
		"-c", "SET statement_timeout = '300ms'", "-c", "SHOW statement_timeout", "-c", "SELECT pg_sleep(10)", "turbine")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "PGCONNECT_TIMEOUT=5", "LC_ALL=C", "PGSSLMODE=disable"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("psql took %v", took)
	}
	if err == nil || stdout.String() != "SET\n300ms\n" ||
		!strings.Contains(stderr.String(), "ERROR:  canceling statement due to statement timeout") {
		t.Errorf("psql: %v\nstdout: %q\nstderr: %q", err, stdout.String(), stderr.String())
	}
}
