package server

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a log sink tests read while the server writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(msg string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, l := range strings.Split(s.b.String(), "\n") {
		if strings.Contains(l, "msg="+msg+" ") || strings.Contains(l, `msg="`+msg+`"`) {
			out = append(out, l)
		}
	}
	return out
}

// waitLine waits for a log line with msg and every one of attrs.
func (s *syncBuffer) waitLine(t *testing.T, msg string, attrs ...string) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		for _, l := range s.lines(msg) {
			ok := true
			for _, a := range attrs {
				ok = ok && strings.Contains(l, a)
			}
			if ok {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line %q with %v; lines with that message: %q", msg, attrs, s.lines(msg))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLogs checks the info lines an operator reads: DDL, the plan chosen,
// stream start (with how many partitions resumed from state) and stop,
// the catalog's restore progress, a partition going idle and active, and
// late rows logged once per burst.
func TestLogs(t *testing.T) {
	parallel(t)
	if testBrokers() != "" {
		isolateTopics(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	logs := &syncBuffer{}
	withLog := func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(logs, nil)) }
	dir := t.TempDir()
	srv := startTestServer(t, dir, withLog)
	defer func() { srv.Close() }()
	conn := connect(ctx, t, srv)
	exec := func(q string) {
		t.Helper()
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`CREATE SOURCE lg (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'lg', partitions = 2, partition_key = 'k', idle_timeout = INTERVAL '500' MILLISECOND)`)
	logs.waitLine(t, "DDL", `statement="CREATE SOURCE"`, "object=lg", "user=turbine")
	exec(`CREATE STREAM lg_n AS SELECT k, COUNT(*) AS n FROM lg GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`)
	logs.waitLine(t, "plan chosen", "stream=lg_n", "strategy=local", "rule=LocalPartitionKey")
	logs.waitLine(t, "stream started", "stream=lg_n", "partitions=2", "restored_partitions=0")
	// Nothing to read: both partitions go idle once their timeout passes.
	logs.waitLine(t, "partition idle: its watermark follows the others'", "stage=lg_n", "topic=lg", "partition=0")
	exec(`INSERT INTO lg VALUES ('a', TIMESTAMP '2026-01-01 00:05:00'), ('b', TIMESTAMP '2026-01-01 00:05:00')`)
	logs.waitLine(t, "partition active again", "stage=lg_n", "topic=lg")
	exec(`FLUSH`)
	// Three late rows in quick succession, in two FLUSHes (and however
	// many batches the reads make): one line, for the first batch; the
	// rest wait for the next line, 10 s on.
	exec(`INSERT INTO lg VALUES ('a', TIMESTAMP '2026-01-01 00:01:00'), ('a', TIMESTAMP '2026-01-01 00:01:01')`)
	exec(`FLUSH`)
	exec(`INSERT INTO lg VALUES ('a', TIMESTAMP '2026-01-01 00:01:02')`)
	exec(`FLUSH`)
	logs.waitLine(t, "late rows", "stream=lg_n", "action=dropped")
	deadline := time.Now().Add(2 * time.Second)
	for gathered(t, srv)["turbine_late_rows_total{action=dropped,stream=lg_n}"] < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(logs.lines("late rows")); n != 1 {
		t.Fatalf("%d late-row lines within %v, want 1: %q", n, 10*time.Second, logs.lines("late rows"))
	}
	conn.Close(ctx)
	srv.Close()

	srv = startTestServer(t, dir, withLog)
	logs.waitLine(t, "restoring the catalog", "records=2")
	logs.waitLine(t, "restoring", "object=stream/lg_n", "step=2", "of=2")
	logs.waitLine(t, "catalog restored", "records=2", "failed=0")
	logs.waitLine(t, "stream started", "stream=lg_n", "restored_partitions=")
	if l := logs.lines("stream started"); !strings.Contains(l[len(l)-1], "restored_partitions=1") && !strings.Contains(l[len(l)-1], "restored_partitions=2") {
		t.Fatalf("after a restart: %q, want partitions resumed from state", l[len(l)-1])
	}
	conn = connect(ctx, t, srv)
	defer conn.Close(ctx)
	exec(`DROP STREAM lg_n`)
	logs.waitLine(t, "stream stopped", "stream=lg_n")
	logs.waitLine(t, "DDL", "statement=DROP", "object=lg_n")
}
