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
