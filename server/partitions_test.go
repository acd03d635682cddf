package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/turbinesql/turbinesql/state"
)

// TestInputGrowsWhileRunning: partitions added to a source while the
// server runs are picked up without a restart (the stream's tasks cover
// them; each partition keeps its own state, so a key that moved starts
// empty), every stage's input
// offsets are committed to its consumer group, and a count that stops
// dividing 960 stops the keyed stream with CREATE's message while a
// stateless one carries on.
func TestInputGrowsWhileRunning(t *testing.T) {
	parallel(t)
	ctx, srv, conn := testSession(t, 2*time.Minute)
	exec := func(q string) {
		t.Helper()
		execAll(ctx, t, conn, q)
	}
	exec(`CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 2, partition_key = 'k')`)
	exec(`CREATE STREAM counts WITH (topic = 'counts') AS SELECT k, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n
		FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`)
	exec(`CREATE STREAM copy WITH (topic = 'copy') AS SELECT k, ts FROM ev`)
	insert := func(sec int) {
		t.Helper()
		var vals []string
		for i := 0; i < 12; i++ {
			vals = append(vals, fmt.Sprintf("('key%d', TIMESTAMP '2026-01-01 00:%02d:%02d')", i, sec/60, sec%60))
		}
		exec("INSERT INTO ev VALUES " + strings.Join(vals, ", "))
	}
	insert(1)
	exec("FLUSH")
	checkGroup := func(stream string) {
		t.Helper()
		ends, err := srv.kafka.EndOffsets(ctx, "ev")
		if err != nil {
			t.Fatal(err)
		}
		got, err := srv.kafka.GroupOffsets(ctx, srv.groupName(stream), "ev")
		if err != nil {
			t.Fatal(err)
		}
		for p, end := range ends {
			if got[p] != end {
				t.Fatalf("group %s: partition %d committed at %d, end %d (%v)", srv.groupName(stream), p, got[p], end, got)
			}
		}
	}
	checkGroup("counts")
	checkGroup("copy")
	// Everything read: the lag gauge says 0 for every partition.
	fams, err := srv.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	lags := 0
	for _, f := range fams {
		if f.GetName() != "turbine_input_lag_records" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["stream"] == "counts" && labels["topic"] == "ev" {
				lags++
				if v := m.GetGauge().GetValue(); v != 0 {
					t.Errorf("partition %s: lag %v after FLUSH", labels["partition"], v)
				}
			}
		}
	}
	if lags != 2 {
		t.Errorf("%d lag gauges for counts, want one per partition (2)", lags)
	}

	// Grown to 4: rows for keys now placed on partitions 2 and 3 are read.
	// A partition's state is its own: a key that stayed carries its window
	// across the change (one pane of 2), a key that moved starts empty on
	// its new partition while the one it left still closes the window with
	// the row it had (two panes of 1; the source declares no
	// partition_hash, so nothing is cleaned up).
	if err := srv.kafka.CreatePartitions(ctx, "ev", 4); err != nil {
		t.Fatal(err)
	}
	waitTasks(ctx, t, conn, srv, "counts", 4)
	insert(2)
	insert(70)
	exec("FLUSH")
	want := map[string]string{}
	for i := 0; i < 12; i++ {
		k := fmt.Sprintf("key%d", i)
		want[k] = "[2]"
		if state.PartitionFor([]byte(k), 2) != state.PartitionFor([]byte(k), 4) {
			want[k] = "[1 1]"
		}
	}
	rows, err := conn.Query(ctx, "SELECT k, n FROM counts WHERE ws = TIMESTAMP '2026-01-01 00:00:00' ORDER BY k, n")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		got[k] = append(got[k], n)
	}
	rows.Close()
	for k, w := range want {
		if fmt.Sprint(got[k]) != w {
			t.Errorf("key %s: panes %v, want %s", k, got[k], w)
		}
	}
	if len(got) != 12 {
		t.Fatalf("panes of %d keys, want 12: %v", len(got), got)
	}
	checkGroup("counts")

	// Grown to 7, which does not divide 960: the keyed stream stops with
	// the refusal CREATE STREAM gives; the stateless one reads all 7.
	if err := srv.kafka.CreatePartitions(ctx, "ev", 7); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		status, msg := streamStatus(ctx, t, conn, "counts")
		if status == "failed" {
			if !strings.Contains(msg, "does not divide 960") || !strings.Contains(msg, "closest valid counts: 6 and 8") {
				t.Fatalf("counts failed with %q", msg)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("counts still %s on 7 partitions", status)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitTasks(ctx, t, conn, srv, "copy", 7)
	insert(80)
	if _, err := conn.Exec(ctx, "FLUSH"); err == nil || !strings.Contains(err.Error(), "counts") {
		t.Fatalf("FLUSH: %v, want it to name the stopped stream", err)
	}
	var copied int64
	if err := conn.QueryRow(ctx, "SELECT COUNT(*) FROM copy").Scan(&copied); err != nil {
		t.Fatal(err)
	}
	if copied != 48 {
		t.Fatalf("copy holds %d rows, want 48", copied)
	}
}

// waitTasks waits until a stream's last stage runs a task per partition
// of n.
func waitTasks(ctx context.Context, t *testing.T, conn *pgx.Conn, srv *Server, stream string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		srv.mu.Lock()
		r := srv.streams[stream]
		got := 0
		if r != nil && r.final != nil {
			got = r.final.Partitions()
		}
		srv.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s runs %d tasks, want %d", stream, got, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// streamStatus reads a stream's status and error from SHOW STREAMS.
func streamStatus(ctx context.Context, t *testing.T, conn *pgx.Conn, name string) (string, string) {
	t.Helper()
	row := showRow(ctx, t, conn, name)
	msg, _ := row[11].(string)
	return row[4].(string), msg
}

// showRow is a stream's row of SHOW STREAMS.
func showRow(ctx context.Context, t *testing.T, conn *pgx.Conn, name string) []any {
	t.Helper()
	res, err := conn.Query(ctx, "SHOW STREAMS")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	for res.Next() {
		vals, err := res.Values()
		if err != nil {
			t.Fatal(err)
		}
		if vals[0] == name {
			return vals
		}
	}
	t.Fatalf("stream %s not in SHOW STREAMS", name)
	return nil
}
