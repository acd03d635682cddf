package server

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/turbinesql/turbinesql/state"
)

// TestRecoveredDueTimers stops a stream with a window open, moves the
// persisted close watermark of its partition past the window's end (as if the process had died
// after its watermark was written but before the close was emitted), and
// starts again: the window closes at once, its pane is emitted, and the
// start counts it in turbine_recovered_due_timers_total.
func TestRecoveredDueTimers(t *testing.T) {
	if testBrokers() != "" {
		isolateTopics(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	srv := startTestServer(t, dir)
	conn := connect(ctx, t, srv)
	for _, q := range []string{
		`CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH (topic = 'ev', partitions = 1, partition_key = 'k')`,
		`CREATE STREAM counts WITH (topic = 'counts') AS SELECT k, TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '10' SECOND)`,
		`INSERT INTO ev VALUES ('a', TIMESTAMP '2026-01-01 00:00:01'), ('a', TIMESTAMP '2026-01-01 00:00:02')`,
		`FLUSH`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	conn.Close(ctx)
	srv.Close()

	st, err := state.Open(filepath.Join(dir, "state"), nil)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := st.Partitions("counts")
	if err != nil {
		t.Fatal(err)
	}
	meta := parts[0]
	if !meta.HasClosed || meta.Closed >= time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC).UnixMilli() {
		t.Fatalf("persisted partition state %+v: the window should still be open", meta)
	}
	b := st.NewBatch("counts")
	meta.Closed = time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC).UnixMilli()
	if err := b.PutPartition(0, meta); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	srv = startTestServer(t, dir)
	defer srv.Close()
	conn = connect(ctx, t, srv)
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "FLUSH"); err != nil {
		t.Fatal(err)
	}
	var k string
	var n int64
	if err := conn.QueryRow(ctx, "SELECT k, n FROM counts").Scan(&k, &n); err != nil {
		t.Fatalf("the due window was not emitted: %v", err)
	}
	if k != "a" || n != 2 {
		t.Fatalf("pane %s %d, want a 2", k, n)
	}
	var m dto.Metric
	if err := srv.metrics.RecoveredTimers.WithLabelValues("counts").Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != 1 {
		t.Fatalf("turbine_recovered_due_timers_total = %v, want 1", got)
	}
}
