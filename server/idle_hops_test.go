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

// TestIdlePartitionsDelayHops is issue 38's first item: a window closes only
// once every source partition has confirmed it, idle partitions included.
// Four source partitions, idle_timeout 1 s, and the same aggregation in a
// local, a repartition, a combine and a keyless (combine) plan:
//
//   - quiet before: every partition goes idle before it has a row (no
//     watermark at all); then rows reach all four at once, partition 0's
//     running a window ahead. The merge side of the hops must wait for the
//     rows of the others, not close their window on partition 0's marker
//     while their idle markers still stand;
//   - quiet between: idle again, each partition's watermark just below the
//     end of a window that is still open; then rows for that window on all
//     four at once, partition 0's again ahead. A partition idle for
//     seconds must not follow partition 0's new watermark past that window
//     before its own rows are read;
//   - quiet after: nothing more; the quiet partitions follow partition 0
//     (or FLUSH lifts them) and every window below it closes.
//
// Each pane must be exact, no row late, no partial dropped at the merge,
// under both delivery guarantees, with FLUSH after each batch and without.
func TestIdlePartitionsDelayHops(t *testing.T) {
	for _, guarantee := range []string{"at_least_once", "exactly_once"} {
		for _, flush := range []bool{false, true} {
			name := guarantee + "/no_flush"
			if flush {
				name = guarantee + "/flush"
			}
			t.Run(name, func(t *testing.T) {
				parallel(t)
				runIdleHops(t, guarantee, flush)
			})
		}
	}
}

func runIdleHops(t *testing.T, guarantee string, flush bool) {
	ctx, srv, conn := testSession(t, 2*time.Minute)
	execAll(ctx, t, conn, `CREATE SOURCE ev (k TEXT, u TEXT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)
		WITH (topic = 'ev', partitions = 4, partition_key = 'k', idle_timeout = INTERVAL '1' SECOND)`)
	type plan struct{ name, strategy, key string }
	plans := []plan{{"by_k", "local", "k"}, {"by_u_rep", "repartition", "u"}, {"by_u_cmb", "combine", "u"}}
	for _, p := range plans {
		execAll(ctx, t, conn, fmt.Sprintf(`CREATE STREAM %s WITH (topic = '%s', strategy = '%s', processing_guarantee = '%s') AS
			SELECT %s AS g, TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n, SUM(v) AS s
			FROM ev GROUP BY %s, TUMBLE(ts, INTERVAL '10' SECOND)`, p.name, p.name, p.strategy, guarantee, p.key, p.key))
	}
	execAll(ctx, t, conn, fmt.Sprintf(`CREATE STREAM every WITH (topic = 'every', processing_guarantee = '%s') AS
		SELECT TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n, SUM(v) AS s
		FROM ev GROUP BY TUMBLE(ts, INTERVAL '10' SECOND)`, guarantee))

	keys := keysByPartition(4, 2)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var rows []burstRow
	// produce writes one batch in one request: the rows of every
	// partition are in Kafka together, before any task reads one of them.
	produce := func(batch []burstRow) {
		t.Helper()
		var recs []*kafkaio.Record
		for _, r := range batch {
			val, _ := json.Marshal(map[string]any{"k": r.k, "u": r.u, "v": r.v, "ts": r.ts.UnixMilli()})
			recs = append(recs, &kafkaio.Record{Topic: "ev", Partition: partitionOf(keys, r.k), Key: []byte(r.k), Value: val})
		}
		if err := srv.kafka.ProduceSync(ctx, recs); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, batch...)
	}
	// row is a row of partition p at ms past base; u spreads each group of
	// the hops over every partition.
	n := 0
	row := func(p int, ms int) burstRow {
		n++
		return burstRow{k: keys[p][n%2], u: fmt.Sprintf("u%d", n%3), v: int64(n), ts: base.Add(time.Duration(ms) * time.Millisecond)}
	}
	quiet := func() { time.Sleep(2500 * time.Millisecond) } // idle_timeout is 1 s
	check := func(closed time.Duration) {
		t.Helper()
		end := base.Add(closed)
		if flush {
			execAll(ctx, t, conn, "FLUSH")
		} else {
			waitClosed(ctx, t, conn, []string{"by_k", "by_u_rep", "by_u_cmb", "every"}, rows, end)
		}
		checkPanes(ctx, t, conn, "by_k", rows, end, func(r burstRow) string { return r.k })
		checkPanes(ctx, t, conn, "by_u_rep", rows, end, func(r burstRow) string { return r.u })
		checkPanes(ctx, t, conn, "by_u_cmb", rows, end, func(r burstRow) string { return r.u })
		checkPanesOf(ctx, t, conn, "every", "SELECT '', ws, n, s FROM every", rows, end, func(burstRow) string { return "" })
		for _, name := range []string{"by_k", "by_u_rep", "by_u_cmb", "every"} {
			if late := showLate(ctx, t, conn, name); late != 0 {
				t.Errorf("%s: %d rows judged late", name, late)
			}
			var m dto.Metric
			if err := srv.metrics.CombineLatePartials.WithLabelValues(name).Write(&m); err != nil {
				t.Fatal(err)
			}
			if got := m.GetCounter().GetValue(); got != 0 {
				t.Errorf("%s: %v partials dropped at the merge", name, got)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}

	// Quiet before: every partition idle without a watermark.
	quiet()
	var batch []burstRow
	for p := 0; p < 4; p++ {
		for ms := 5000; ms < 10000; ms += 1000 {
			batch = append(batch, row(p, ms))
		}
	}
	batch = append(batch, row(0, 12_000))
	produce(batch)
	// Partition 0 is at 00:00:12; [0, 10) closes once the others follow.
	check(10 * time.Second)

	// Quiet between: partitions 1-3 idle at 00:00:19, partition 0 at
	// 00:00:19.5; [10, 20) is open everywhere.
	batch = nil
	for p := 1; p < 4; p++ {
		batch = append(batch, row(p, 19_000))
	}
	batch = append(batch, row(0, 19_500))
	produce(batch)
	quiet()
	// Then rows of [10, 20) on every partition, partition 0 already at 00:00:35.
	batch = nil
	for p := 0; p < 4; p++ {
		batch = append(batch, row(p, 19_800), row(p, 19_900))
	}
	batch = append(batch, row(0, 35_000))
	produce(batch)
	// Quiet after: the others follow partition 0 to 00:00:35.
	check(30 * time.Second)
}

// partitionOf is the partition keysByPartition found key k for.
func partitionOf(keys [][]string, k string) int32 {
	for p, ks := range keys {
		for _, x := range ks {
			if x == k {
				return int32(p)
			}
		}
	}
	panic("unknown key " + k)
}

// waitClosed waits until every stream has written a pane for each window
// that ends by closed and holds a row (right or wrong: the caller checks
// them), or 30 s have passed.
func waitClosed(ctx context.Context, t *testing.T, conn *pgx.Conn, streams []string, rows []burstRow, closed time.Time) {
	t.Helper()
	want := map[time.Time]bool{}
	for _, r := range rows {
		if ws := r.ts.Truncate(10 * time.Second); !ws.Add(10 * time.Second).After(closed) {
			want[ws] = true
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, name := range streams {
		for {
			res, err := conn.Query(ctx, "SELECT ws FROM "+name)
			if err != nil {
				t.Fatal(err)
			}
			have := map[time.Time]bool{}
			for res.Next() {
				var ws time.Time
				if err := res.Scan(&ws); err != nil {
					t.Fatal(err)
				}
				have[ws.UTC()] = true
			}
			res.Close()
			missing := 0
			for ws := range want {
				if !have[ws] {
					missing++
				}
			}
			if missing == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d windows ending by %s not closed after 30 s", name, missing, closed.Format(time.TimeOnly))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
