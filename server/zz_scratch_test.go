package server

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestScratchFlushTime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Second)
	defer cancel()
	_, start := appNodes(t, 4, "fl", func(c *Config) { c.SessionTimeout = 10 * time.Second })
	a := start(t.TempDir())
	conn := connect(ctx, t, a)
	stmts := []string{`CREATE SOURCE ev (k TEXT, u TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 4, partition_key = 'k')`}
	for i := 0; i < 4; i++ {
		stmts = append(stmts,
			fmt.Sprintf(`CREATE STREAM l%d WITH (processing_guarantee = 'exactly_once') AS SELECT k, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' SECOND)`, i),
			fmt.Sprintf(`CREATE STREAM r%d WITH (processing_guarantee = 'exactly_once', strategy = 'repartition') AS SELECT u, COUNT(*) AS n FROM ev GROUP BY u, TUMBLE(ts, INTERVAL '1' SECOND)`, i),
			fmt.Sprintf(`CREATE STREAM c%d WITH (processing_guarantee = 'exactly_once', strategy = 'combine') AS SELECT u, COUNT(*) AS n FROM ev GROUP BY u, TUMBLE(ts, INTERVAL '1' SECOND)`, i))
	}
	execAll(ctx, t, conn, stmts...)
	b := start(t.TempDir())
	defer b.Close()
	c := start(t.TempDir())
	defer c.Close()
	time.Sleep(3 * time.Second)
	for round := 0; round < 4; round++ {
		execAll(ctx, t, conn, fmt.Sprintf(`INSERT INTO ev VALUES ('a', 'x', TIMESTAMP '2026-01-01 00:00:0%d'), ('b', 'y', TIMESTAMP '2026-01-01 00:00:0%d'), ('c', 'z', TIMESTAMP '2026-01-01 00:00:0%d')`, round, round, round))
		t0 := time.Now()
		execAll(ctx, t, conn, `FLUSH`)
		t.Logf("FLUSH %d: %v", round, time.Since(t0))
	}
	conn.Close(ctx)
	a.Close()
}
