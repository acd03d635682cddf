package server

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMisspelledFunctionHints: a misspelled function is 42883 naming it,
// with the closest function as the hint (COUNTT(*) included, which the
// grammar alone would call a syntax error at *), and no message quotes a
// name with MySQL's backticks.
func TestMisspelledFunctionHints(t *testing.T) {
	srv := startTestServer(t, t.TempDir())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := connect(ctx, t, srv)
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE SOURCE ev (k TEXT, v BIGINT, ts TIMESTAMP) WITH (topic = 'ev', partitions = 1)"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ q, msg, hint string }{
		{"SELECT COUNTT(*) FROM ev", "function countt does not exist", "count(*)"},
		{"SELECT summ(v) FROM ev", "function summ does not exist", "sum"},
		{"SELECT uper(k) FROM ev", "function uper does not exist", "upper"},
		{"SELECT lenght(k) FROM ev", "function lenght does not exist", "length"},
	} {
		_, err := c.Exec(ctx, tc.q)
		wantCode(t, tc.q, err, "42883", "")
		pe := pgErr(err)
		if pe == nil {
			continue
		}
		if pe.Message != tc.msg || !strings.Contains(pe.Hint, tc.hint) {
			t.Errorf("%s: %q hint %q, want %q with a hint naming %s", tc.q, pe.Message, pe.Hint, tc.msg, tc.hint)
		}
	}
	for _, q := range []string{
		"SELECT k, SUM(v) FROM ev GROUP BY k HAVING frob(v) > 1",
		"CREATE STREAM s WITH (topic = 's', strategy = 'combine') AS SELECT k, COUNT(*) FROM ev GROUP BY k, SESSION(ts, INTERVAL '1' SECOND)",
		"SELECT SUM(k) FROM ev",
	} {
		_, err := c.Exec(ctx, q)
		if pe := pgErr(err); pe == nil || strings.Contains(pe.Message+pe.Hint+pe.Detail, "`") {
			t.Errorf("%s: %v, want an error without backticks", q, err)
		}
	}
}

// TestDataDirHeld: a second server on a data dir in use fails at once,
// naming the first one's pid and pgwire address; once the first stops, the
// dir starts again.
func TestDataDirHeld(t *testing.T) {
	parallel(t)
	dir := t.TempDir()
	first := startTestServer(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := Config{DataDir: dir, PGAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", KafkaAddr: "127.0.0.1:0", AppID: "slt"}
	second, err := Start(ctx, cfg)
	if err == nil {
		second.Close()
		first.Close()
		t.Fatal("a second server started on a data dir in use")
	}
	want := fmt.Sprintf("in use by another TurbineSQL server (pid %d, pgwire %s", os.Getpid(), first.pgLn.Addr())
	if !strings.Contains(err.Error(), want) {
		t.Errorf("second server: %v, want it to say %q", err, want)
	}
	first.Close()
	again := startTestServer(t, dir)
	again.Close()
}
