package server

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	dto "github.com/prometheus/client_model/go"

	"github.com/turbinesql/turbinesql/kafkaio"
)

// TestLateRowsAfterIdlePartition is issue 38 item 1's last sentence: a
// partial a combine's merge drops is counted as late when it carries rows
// the pane never had, not taken for a copy. Two source partitions,
// idle_timeout 1 s; the same aggregation in a local, a repartition, a
// combine and a keyless (combine) plan. Partition 0 has rows of [0, 10),
// then moves on to 00:00:25; partition 1 is quiet, so idle, and the hops
// close [0, 10) on partition 0's watermark. Then two rows of [0, 10) reach
// partition 1:
//
//   - quiet_from_start: partition 1 never had a row. Its pre-aggregation
//     takes them (a partition's first rows are never late by the others'
//     progress, and a local plan counts them in its own pane), but the
//     merge closed [0, 10) without them: the combine plans drop the partial
//     and count its two rows as late (SHOW STREAMS' late_rows,
//     turbine_late_rows_total), as the repartition plan counts its own;
//     none of it is a copy (turbine_combine_late_partials_total stays 0);
//   - quiet_after_rows: partition 1 had rows of [0, 10) too, and its
//     watermark followed partition 0's while idle: every plan, the local
//     one too, drops the two rows as late.
//
// No pane changes. Under both delivery guarantees.
func TestLateRowsAfterIdlePartition(t *testing.T) {
	for _, guarantee := range []string{"at_least_once", "exactly_once"} {
		for _, hadRows := range []bool{false, true} {
			name := guarantee + "/quiet_from_start"
			if hadRows {
				name = guarantee + "/quiet_after_rows"
			}
			t.Run(name, func(t *testing.T) {
				parallel(t)
				runLateAfterIdle(t, guarantee, hadRows)
			})
		}
	}
}

func runLateAfterIdle(t *testing.T, guarantee string, hadRows bool) {
	ctx, srv, conn := testSession(t, 2*time.Minute)
	createLateStreams(ctx, t, conn, guarantee, "INTERVAL '1' SECOND")
	streams := lateStreams
	keys := keysByPartition(2, 1)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// rows are those the panes hold: every plan's (hops) and the local
	// plan's (local: also partition 1's first rows when it had none).
	var rows, local []burstRow
	produce := func(batch ...burstRow) {
		t.Helper()
		var recs []*kafkaio.Record
		for _, r := range batch {
			val, _ := json.Marshal(map[string]any{"k": r.k, "u": r.u, "v": r.v, "ts": r.ts.UnixMilli()})
			recs = append(recs, &kafkaio.Record{Topic: "ev", Partition: partitionOf(keys, r.k), Key: []byte(r.k), Value: val})
		}
		if err := srv.kafka.ProduceSync(ctx, recs); err != nil {
			t.Fatal(err)
		}
	}
	// u0 and u1 have rows on both partitions: the hops merge their groups
	// from both.
	row := func(p int, u string, v int64, sec int) burstRow {
		return burstRow{k: keys[p][0], u: u, v: v, ts: base.Add(time.Duration(sec) * time.Second)}
	}
	rows = []burstRow{row(0, "u0", 1, 1), row(0, "u1", 2, 2)}
	if hadRows {
		rows = append(rows, row(1, "u0", 4, 3), row(1, "u1", 8, 4))
	}
	rows = append(rows, row(0, "u0", 16, 25))
	produce(rows...)
	local = append(local, rows...)
	// No FLUSH (it would lift partition 1 for good): [0, 10) closes once
	// partition 1 is idle and follows partition 0.
	closed := base.Add(20 * time.Second)
	waitClosed(ctx, t, conn, streams, rows, closed)
	check := func(when string, late, localLate int64) {
		t.Helper()
		checkLateAfterIdle(ctx, t, srv, conn, when, rows, local, closed, late, localLate)
	}
	check("after [0, 10) closed", 0, 0)

	// Two rows of the closed [0, 10) on the idle partition, then one of
	// [20, 30) on each partition: the hops ship past [0, 10) again, and
	// the local plan's partition 1 closes [0, 10).
	lateRows := []burstRow{row(1, "u0", 32, 5), row(1, "u1", 64, 6)}
	produce(lateRows...)
	tail := []burstRow{row(0, "u1", 128, 26), row(1, "u0", 256, 27)}
	produce(tail...)
	rows = append(rows, tail...)
	local = append(local, tail...)
	localLate := int64(2)
	if !hadRows {
		local, localLate = append(local, lateRows...), 0
	}
	waitDropped(ctx, t, conn, srv, 2, localLate, keys[1][0])
	check("after two rows of [0, 10) on the idle partition", 2, localLate)
}

// TestLateRowsOnAddedPartition: a partition added to the source (ALTER
// SOURCE ... SET (partitions = 4)) after [0, 10) closed on every plan. Its
// first rows, two of [0, 10), are not late where they are read (a
// partition's first rows are never late by the others' progress: the
// local plan counts them in its own pane), so the combine's
// pre-aggregation ships them; the merge closed [0, 10) long before, so
// the combine plans drop the partial and count its two rows as late rows,
// as the repartition plan counts its own: the partial carries rows the
// pane never had, it is no copy. No partition is idle: partition 3's
// watermark moves with its own rows. Under both delivery guarantees.
func TestLateRowsOnAddedPartition(t *testing.T) {
	for _, guarantee := range []string{"at_least_once", "exactly_once"} {
		t.Run(guarantee, func(t *testing.T) {
			parallel(t)
			runLateOnAddedPartition(t, guarantee)
		})
	}
}

func runLateOnAddedPartition(t *testing.T, guarantee string) {
	ctx, srv, conn := testSession(t, 2*time.Minute)
	// No partition goes idle: partition 3's rows are its first whenever
	// its task reads them (an idle partition without rows would follow the
	// others, and they would be late where they are read).
	createLateStreams(ctx, t, conn, guarantee, "INTERVAL '1' HOUR")
	keys, keys4 := keysByPartition(2, 1), keysByPartition(4, 1)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	produce := func(p int32, batch ...burstRow) {
		t.Helper()
		var recs []*kafkaio.Record
		for _, r := range batch {
			val, _ := json.Marshal(map[string]any{"k": r.k, "u": r.u, "v": r.v, "ts": r.ts.UnixMilli()})
			recs = append(recs, &kafkaio.Record{Topic: "ev", Partition: p, Key: []byte(r.k), Value: val})
		}
		if err := srv.kafka.ProduceSync(ctx, recs); err != nil {
			t.Fatal(err)
		}
	}
	row := func(k, u string, v int64, sec int) burstRow {
		return burstRow{k: k, u: u, v: v, ts: base.Add(time.Duration(sec) * time.Second)}
	}
	p0 := []burstRow{row(keys[0][0], "u0", 1, 1), row(keys[0][0], "u1", 2, 2), row(keys[0][0], "u0", 16, 25)}
	p1 := []burstRow{row(keys[1][0], "u0", 4, 3), row(keys[1][0], "u1", 8, 4), row(keys[1][0], "u1", 32, 26)}
	produce(0, p0...)
	produce(1, p1...)
	rows := append(append([]burstRow(nil), p0...), p1...)
	closed := base.Add(20 * time.Second)
	waitClosed(ctx, t, conn, lateStreams, rows, closed)
	checkLateAfterIdle(ctx, t, srv, conn, "after [0, 10) closed", rows, rows, closed, 0, 0)

	execAll(ctx, t, conn, "ALTER SOURCE ev SET (partitions = 4)")
	// Partition 3's first rows: two of the closed [0, 10), then one that
	// moves its watermark past it.
	k3 := keys4[3][0]
	lateRows := []burstRow{row(k3, "u0", 64, 5), row(k3, "u1", 128, 6)}
	tail := row(k3, "u0", 256, 27)
	produce(3, append(lateRows, tail)...)
	rows = append(rows, tail)
	local := append(append([]burstRow(nil), rows...), lateRows...)
	waitDropped(ctx, t, conn, srv, 2, 0, k3)
	checkLateAfterIdle(ctx, t, srv, conn, "after two rows of [0, 10) on the added partition", rows, local, closed, 2, 0)
}

// lateStreams are runLateAfterIdle's streams: the local plan first.
var lateStreams = []string{"by_k", "by_u_rep", "by_u_cmb", "every"}

// createLateStreams declares ev (2 partitions, idle_timeout idle) and the
// same aggregation in a local, a repartition, a combine and a keyless plan.
func createLateStreams(ctx context.Context, t *testing.T, conn *pgx.Conn, guarantee, idle string) {
	t.Helper()
	execAll(ctx, t, conn, fmt.Sprintf(`CREATE SOURCE ev (k TEXT, u TEXT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)
		WITH (topic = 'ev', partitions = 2, partition_key = 'k', idle_timeout = %s)`, idle))
	// The hops' internal topics keep 2 partitions when the source grows.
	for _, p := range []struct{ name, with, key string }{{"by_k", "strategy = 'local'", "k"},
		{"by_u_rep", "strategy = 'repartition', repartition_partitions = 2", "u"}, {"by_u_cmb", "strategy = 'combine', combine_partitions = 2", "u"}} {
		execAll(ctx, t, conn, fmt.Sprintf(`CREATE STREAM %s WITH (topic = '%s', %s, processing_guarantee = '%s') AS
			SELECT %s AS g, TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n, SUM(v) AS s
			FROM ev GROUP BY %s, TUMBLE(ts, INTERVAL '10' SECOND)`, p.name, p.name, p.with, guarantee, p.key, p.key))
	}
	execAll(ctx, t, conn, fmt.Sprintf(`CREATE STREAM every WITH (topic = 'every', processing_guarantee = '%s') AS
		SELECT TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n, SUM(v) AS s
		FROM ev GROUP BY TUMBLE(ts, INTERVAL '10' SECOND)`, guarantee))
}

// checkLateAfterIdle checks every pane closed by closed (the hops' from
// rows, the local plan's from local) and that each plan counted late rows
// as late (localLate for the local plan) and no partial as a copy.
func checkLateAfterIdle(ctx context.Context, t *testing.T, srv *Server, conn *pgx.Conn, when string, rows, local []burstRow, closed time.Time, late, localLate int64) {
	t.Helper()
	checkPanes(ctx, t, conn, "by_k", local, closed, func(r burstRow) string { return r.k })
	checkPanes(ctx, t, conn, "by_u_rep", rows, closed, func(r burstRow) string { return r.u })
	checkPanes(ctx, t, conn, "by_u_cmb", rows, closed, func(r burstRow) string { return r.u })
	checkPanesOf(ctx, t, conn, "every", "SELECT '', ws, n, s FROM every", rows, closed, func(burstRow) string { return "" })
	for _, name := range lateStreams {
		want := late
		if name == "by_k" {
			want = localLate
		}
		if got := showLate(ctx, t, conn, name); got != want {
			t.Errorf("%s: %s: late_rows %d, want %d", when, name, got, want)
		}
		var m dto.Metric
		if err := srv.metrics.LateRows.WithLabelValues(name, "dropped").Write(&m); err != nil {
			t.Fatal(err)
		}
		if got := m.GetCounter().GetValue(); got != float64(want) {
			t.Errorf("%s: %s: turbine_late_rows_total{action=dropped} %v, want %d", when, name, got, want)
		}
		if got := latePartials(t, srv, name); got != 0 {
			t.Errorf("%s: %s: turbine_combine_late_partials_total %v, want 0: no partial is a copy", when, name, got)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// latePartials is turbine_combine_late_partials_total of stream name.
func latePartials(t *testing.T, srv *Server, name string) float64 {
	t.Helper()
	var m dto.Metric
	if err := srv.metrics.CombineLatePartials.WithLabelValues(name).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// waitDropped waits until every hop plan has dropped the late rows,
// counted as late or (the bug) as a copy, and the local plan shows
// localLate and has a pane for key k.
func waitDropped(ctx context.Context, t *testing.T, conn *pgx.Conn, srv *Server, late, localLate int64, k string) {
	t.Helper()
	waitFor(t, 30*time.Second, "every plan to drop the late rows", func() bool {
		for _, name := range lateStreams[1:] {
			if showLate(ctx, t, conn, name) < late && latePartials(t, srv, name) == 0 {
				return false
			}
		}
		return showLate(ctx, t, conn, "by_k") == localLate && keyCounts(ctx, t, conn, fmt.Sprintf("SELECT g, n FROM by_k WHERE g = '%s'", k)) != ""
	})
}
