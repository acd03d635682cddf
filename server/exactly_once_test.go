package server

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// TestExactlyOnceCatchesUpAfterStateLag puts every stage of a stream in
// the seed's residual state: a transaction committed a window's pane and
// the input after it, but the state never recorded it (the process died
// between the two). It does so by rolling the state directory back to a
// copy taken one commit earlier. The exactly-once streams (local,
// repartition, combine) replay that input into their state without
// writing anything, retire the window instead of closing it again, and go
// on: every pane exactly once, and the next window counts the replayed
// rows. The at-least-once stream beside them, from the same rolled-back
// state, writes the first pane a second time: the defect exactly-once
// removes.
func TestExactlyOnceCatchesUpAfterStateLag(t *testing.T) {
	if testBrokers() != "" {
		isolateTopics(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	dir := t.TempDir()
	exec1 := func(srv *Server, qs ...string) {
		t.Helper()
		conn := connect(ctx, t, srv)
		defer conn.Close(ctx)
		for _, q := range qs {
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	streams := map[string]string{"loc": "local", "rep": "repartition", "cmb": "combine"}
	ddl := []string{`CREATE SOURCE ev (k TEXT, u TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 1, partition_key = 'k')`}
	for name, strategy := range streams {
		col := "k"
		if strategy != "local" {
			col = "u"
		}
		ddl = append(ddl, fmt.Sprintf(`CREATE STREAM %s WITH (processing_guarantee = 'exactly_once', strategy = '%s') AS
			SELECT %s AS g, TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n FROM ev GROUP BY %s, TUMBLE(ts, INTERVAL '10' SECOND)`, name, strategy, col, col))
	}
	ddl = append(ddl, `CREATE STREAM alo AS SELECT k AS g, TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '10' SECOND)`)

	srv := startTestServer(t, dir)
	exec1(srv, ddl...)
	exec1(srv, `INSERT INTO ev VALUES ('a', 'a', TIMESTAMP '2026-01-01 00:00:01'), ('a', 'a', TIMESTAMP '2026-01-01 00:00:02')`, `FLUSH`)
	srv.Close()
	snap := filepath.Join(t.TempDir(), "state")
	if out, err := exec.Command("cp", "-a", filepath.Join(dir, "state"), snap).CombinedOutput(); err != nil {
		t.Fatalf("copy state: %v %s", err, out)
	}

	// The window [0 s, 10 s) closes here, and two rows go into the next.
	srv = startTestServer(t, dir)
	exec1(srv, `INSERT INTO ev VALUES ('a', 'a', TIMESTAMP '2026-01-01 00:00:12'), ('a', 'a', TIMESTAMP '2026-01-01 00:00:13')`, `FLUSH`)
	srv.Close()

	// The state forgets that commit; Kafka remembers it.
	if err := os.RemoveAll(filepath.Join(dir, "state")); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", snap, filepath.Join(dir, "state")).CombinedOutput(); err != nil {
		t.Fatalf("restore state: %v %s", err, out)
	}

	srv = startTestServer(t, dir)
	defer srv.Close()
	exec1(srv, `FLUSH`, `INSERT INTO ev VALUES ('a', 'a', TIMESTAMP '2026-01-01 00:00:25')`, `FLUSH`)

	conn := connect(ctx, t, srv)
	defer conn.Close(ctx)
	panes := func(stream string) []string {
		t.Helper()
		rows, err := conn.Query(ctx, "SELECT g, ws, n FROM "+stream)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var g string
			var ws time.Time
			var n int64
			if err := rows.Scan(&g, &ws, &n); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%s %s %d", g, ws.UTC().Format("15:04:05"), n))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		slices.Sort(out)
		return out
	}
	want := []string{"a 00:00:00 2", "a 00:00:10 2"}
	for name := range streams {
		if got := panes(name); !slices.Equal(got, want) {
			t.Errorf("%s (exactly-once): panes %v, want %v", name, got, want)
		}
		var m dto.Metric
		if err := srv.metrics.RecoveredTimers.WithLabelValues(name).Write(&m); err != nil {
			t.Fatal(err)
		}
		if m.GetCounter().GetValue() < 1 {
			t.Errorf("%s: turbine_recovered_due_timers_total = %v, want the retired window counted", name, m.GetCounter().GetValue())
		}
	}
	if got := panes("alo"); !slices.Equal(got, []string{"a 00:00:00 2", "a 00:00:00 2", "a 00:00:10 2"}) {
		t.Errorf("alo (at-least-once) from the same state: panes %v, want the first written twice", got)
	}
}
