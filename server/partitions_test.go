package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestInputGrowsWhileRunning: partitions added to a source while the
// server runs are picked up without a restart (the stream's tasks cover
// them, its keyed state follows its key groups), every stage's input
// offsets are committed to its consumer group, and a count that stops
// dividing 960 stops the keyed stream with CREATE's message while a
// stateless one carries on.
func TestInputGrowsWhileRunning(t *testing.T) {
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

	// Grown to 4: rows for keys now placed on partitions 2 and 3 are read,
	// and each key's window holds its rows from before and after.
	if err := srv.kafka.CreatePartitions(ctx, "ev", 4); err != nil {
		t.Fatal(err)
	}
	waitTasks(ctx, t, conn, srv, "counts", 4)
	insert(2)
	insert(70)
	exec("FLUSH")
	var panes, total int64
	if err := conn.QueryRow(ctx, "SELECT COUNT(*), SUM(n) FROM counts").Scan(&panes, &total); err != nil {
		t.Fatal(err)
	}
	if panes != 12 || total != 24 {
		t.Fatalf("%d panes holding %d rows, want 12 panes of 2", panes, total)
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
