package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestAlterSourcePartitions: ALTER SOURCE ... SET (partitions = M) grows
// the topic, records M in the catalog (the source's statement), restarts
// the readers on M (their state's count history says 2,4), and warns,
// naming the keyed stateful streams and only those, that keys which move
// start empty.
func TestAlterSourcePartitions(t *testing.T) {
	parallel(t)
	if testBrokers() != "" {
		isolateTopics(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := startTestServer(t, t.TempDir())
	defer srv.Close()
	conn := connectNotices(ctx, t, srv)
	defer conn.Close(ctx)
	exec := func(q string) []*pgconn.Notice {
		t.Helper()
		conn.takeNotices()
		execAll(ctx, t, conn.Conn, q)
		return conn.takeNotices()
	}
	exec(`CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 2, partition_key = 'k')`)
	exec(`CREATE STREAM counts AS SELECT k, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`)
	exec(`CREATE STREAM copy AS SELECT k, ts FROM ev`)
	exec(`CREATE SOURCE plain (k TEXT, ts TIMESTAMP) WITH (topic = 'plain', partitions = 2)`)
	exec(`CREATE STREAM plain_copy AS SELECT k, ts FROM plain`)
	exec(`INSERT INTO ev VALUES ('a', TIMESTAMP '2026-01-01 00:00:01')`)
	exec("FLUSH")

	ns := exec(`ALTER SOURCE ev SET (partitions = 4)`)
	if len(ns) != 1 {
		t.Fatalf("ALTER SOURCE ev raised %d notices, want 1: %v", len(ns), ns)
	}
	n := ns[0]
	if n.Severity != "WARNING" || !strings.Contains(n.Message, "(counts)") || !strings.Contains(n.Message, "start with empty state") ||
		!strings.Contains(n.Hint, "turbinesql rescale") {
		t.Errorf("notice: %s %q hint %q", n.Severity, n.Message, n.Hint)
	}
	if got, err := srv.kafka.Partitions(ctx, "ev"); err != nil || got != 4 {
		t.Fatalf("topic ev has %d partitions (%v), want 4", got, err)
	}
	src, _ := srv.cat.Source("ev")
	if src.Partitions != 4 || !strings.Contains(src.SQL, "partitions = 4") {
		t.Errorf("catalog keeps partitions %d: %s", src.Partitions, src.SQL)
	}
	waitTasks(ctx, t, conn.Conn, srv, "counts", 4)
	exec(`INSERT INTO ev VALUES ('a', TIMESTAMP '2026-01-01 00:00:02')`)
	exec("FLUSH")
	rows, err := conn.Query(ctx, "SHOW PARTITIONS counts")
	if err != nil {
		t.Fatal(err)
	}
	var hist []string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		hist = append(hist, vals[3].(string))
	}
	rows.Close()
	if strings.Join(hist, " ") != "2,4 2,4 4 4" {
		t.Errorf("count history per partition: %v, want [2,4 2,4 4 4]", hist)
	}
	// Only stateless readers: grown without a warning.
	if ns := exec(`ALTER SOURCE plain SET (partitions = 3)`); len(ns) != 0 {
		t.Errorf("ALTER SOURCE plain raised %v", ns)
	}
}
