package server

import (
	"context"
	"testing"
	"time"
)

// TestShowCreateRecreates: what SHOW CREATE prints for a source (altered
// since) and a stream re-creates them: dropped and run again, each shows
// the same statement, and the stream computes over the source again.
func TestShowCreateRecreates(t *testing.T) {
	parallel(t)
	srv := startTestServer(t, t.TempDir())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := connect(ctx, t, srv)
	defer c.Close(ctx)
	exec := func(q string) {
		t.Helper()
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	showCreate := func(kind, name string) string {
		t.Helper()
		var n, text string
		if err := c.QueryRow(ctx, "SHOW CREATE "+kind+" "+name).Scan(&n, &text); err != nil {
			t.Fatalf("SHOW CREATE %s %s: %v", kind, name, err)
		}
		if n != name {
			t.Fatalf("SHOW CREATE %s %s names %q", kind, name, n)
		}
		return text
	}
	exec(`CREATE SOURCE pay (who TEXT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'pay', partitions = 2, partition_key = 'who')`)
	exec(`ALTER SOURCE pay SET (idle_timeout = INTERVAL '3' SECOND, on_error = 'skip')`)
	exec(`CREATE STREAM big WITH (topic = 'big_pay') AS SELECT who, amount * 2 AS doubled FROM pay WHERE amount > 10`)
	src, st := showCreate("SOURCE", "pay"), showCreate("STREAM", "big")

	exec(`DROP STREAM big`)
	exec(`DROP SOURCE pay`)
	exec(src)
	exec(st)
	if got := showCreate("SOURCE", "pay"); got != src {
		t.Errorf("re-created source shows\n%s\nwant\n%s", got, src)
	}
	if got := showCreate("STREAM", "big"); got != st {
		t.Errorf("re-created stream shows\n%s\nwant\n%s", got, st)
	}
	exec(`INSERT INTO pay VALUES ('zoe', 21, TIMESTAMP '2026-01-01 00:00:00'), ('al', 3, TIMESTAMP '2026-01-01 00:00:01')`)
	exec(`FLUSH`)
	var who string
	var doubled int64
	if err := c.QueryRow(ctx, "SELECT who, doubled FROM big WHERE who = 'zoe'").Scan(&who, &doubled); err != nil || doubled != 42 {
		t.Fatalf("re-created stream: %s %d, %v; want zoe 42", who, doubled, err)
	}
}

// TestDropCascadeNotice: DROP ... CASCADE says what it dropped as
// PostgreSQL does (one NOTICE, a detail line per dependent), readers
// before what they read, and the dropped streams stop.
func TestDropCascadeNotice(t *testing.T) {
	parallel(t)
	srv := startTestServer(t, t.TempDir())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := connectNotices(ctx, t, srv)
	defer c.Close(ctx)
	for _, q := range []string{
		`CREATE SOURCE ev (k TEXT, v BIGINT) WITH (topic = 'ev', partitions = 1, partition_key = 'k')`,
		`CREATE STREAM big WITH (message_key = 'k') AS SELECT k, v FROM ev WHERE v > 10`,
		`CREATE STREAM big_sum AS SELECT k, SUM(v) AS s FROM big GROUP BY k`,
		`CREATE STREAM per_k AS SELECT k, COUNT(*) AS n FROM ev GROUP BY k`,
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	c.takeNotices()
	if _, err := c.Exec(ctx, `DROP SOURCE ev CASCADE`); err != nil {
		t.Fatal(err)
	}
	ns := c.takeNotices()
	if len(ns) == 0 || ns[0].Message != "drop cascades to 3 other objects" ||
		ns[0].Detail != "drop cascades to stream big_sum\ndrop cascades to stream big\ndrop cascades to stream per_k" {
		t.Fatalf("notices %+v, want one naming big_sum, big, per_k in that order", ns)
	}
	if n := len(srv.cat.Readers("ev")); n != 0 {
		t.Errorf("%d readers of ev left", n)
	}
	for _, name := range []string{"ev", "big", "big_sum", "per_k"} {
		if _, ok := srv.cat.Relation(name); ok {
			t.Errorf("%s still in the catalog", name)
		}
	}
	srv.mu.Lock()
	running := len(srv.streams)
	srv.mu.Unlock()
	if running != 0 {
		t.Errorf("%d streams still running after the cascade", running)
	}
}
