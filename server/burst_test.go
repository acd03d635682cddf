package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/state"
)

// burstRow is one produced input row.
type burstRow struct {
	k, u string
	v    int64
	ts   time.Time
}

// keysByPartition finds n keys that murmur2 places on each of parts
// partitions.
func keysByPartition(parts, n int) [][]string {
	out := make([][]string, parts)
	for i := 0; ; i++ {
		k := fmt.Sprintf("k%d", i)
		p := state.PartitionFor([]byte(k), parts)
		if len(out[p]) < n {
			out[p] = append(out[p], k)
		}
		full := true
		for _, ks := range out {
			full = full && len(ks) == n
		}
		if full {
			return out
		}
	}
}

// TestBurstAfterQuietSpell: after a quiet spell longer than idle_timeout,
// a backlog reaches the 4 partitions of a source 300 ms apart (a producer
// that flushes partitions unevenly). No valid row may be judged late, in a
// local, a repartition and a combine plan alike, and every pane is exact.
// The first partition fetched after the spell must not move a watermark
// that another partition's rows, about to arrive, are then judged by.
func TestBurstAfterQuietSpell(t *testing.T) {
	parallel(t)
	ctx, srv, conn := testSession(t, 2*time.Minute)
	exec := func(q string) {
		t.Helper()
		execAll(ctx, t, conn, q)
	}
	exec(`CREATE SOURCE ev (k TEXT, u TEXT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)
		WITH (topic = 'ev', partitions = 4, partition_key = 'k', idle_timeout = INTERVAL '1' SECOND)`)
	keys := keysByPartition(4, 3)
	rng := rand.New(rand.NewPCG(7, 11))
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var rows []burstRow
	produce := func(p int, from, to time.Duration, n int) {
		t.Helper()
		var recs []*kafkaio.Record
		for i := 0; i < n; i++ {
			r := burstRow{k: keys[p][rng.IntN(len(keys[p]))], u: fmt.Sprintf("u%d", rng.IntN(7)), v: rng.Int64N(100),
				ts: base.Add(from + time.Duration(i)*(to-from)/time.Duration(n))}
			rows = append(rows, r)
			val, _ := json.Marshal(map[string]any{"k": r.k, "u": r.u, "v": r.v, "ts": r.ts.UnixMilli()})
			recs = append(recs, &kafkaio.Record{Topic: "ev", Partition: int32(p), Key: []byte(r.k), Value: val})
		}
		if err := srv.kafka.ProduceSync(ctx, recs); err != nil {
			t.Fatal(err)
		}
	}
	// Every partition reaches 00:00:20 before the streams start, and they
	// read it all. (Produced after them, a partition whose first rows came
	// more than idle_timeout after its hop task started, and after another
	// partition's rows, would have taken that partition's watermark while
	// idle without one of its own (window.Partition.FeedsMerge), so a slow
	// machine would judge its rows late: not this test's case.)
	for p := 0; p < 4; p++ {
		produce(p, 0, 20*time.Second, 40)
	}
	for _, s := range []struct{ name, key, strategy string }{
		{"by_k", "k", "local"}, {"by_u_rep", "u", "repartition"}, {"by_u_cmb", "u", "combine"},
	} {
		exec(fmt.Sprintf(`CREATE STREAM %s WITH (topic = '%s', strategy = '%s') AS
			SELECT %s AS g, TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n, SUM(v) AS s
			FROM ev GROUP BY %s, TUMBLE(ts, INTERVAL '10' SECOND)`, s.name, s.name, s.strategy, s.key, s.key))
	}
	waitIn(ctx, t, conn, 160)
	// The quiet spell: every partition goes idle.
	time.Sleep(2500 * time.Millisecond)
	// The backlog, a partition at a time, 300 ms apart: 00:00:20 to 00:01:00.
	for p := 0; p < 4; p++ {
		produce(p, 20*time.Second, 60*time.Second, 200)
		time.Sleep(300 * time.Millisecond)
	}
	waitIn(ctx, t, conn, 160+800)
	time.Sleep(1500 * time.Millisecond)
	exec("FLUSH")
	for _, name := range []string{"by_k", "by_u_rep", "by_u_cmb"} {
		if late := showLate(ctx, t, conn, name); late != 0 {
			t.Errorf("%s: %d rows judged late", name, late)
		}
	}
	// FLUSH closed what the highest watermark passed: 00:01:00 - 2 s.
	closed := base.Add(58 * time.Second)
	checkPanes(ctx, t, conn, "by_k", rows, closed, func(r burstRow) string { return r.k })
	checkPanes(ctx, t, conn, "by_u_rep", rows, closed, func(r burstRow) string { return r.u })
	checkPanes(ctx, t, conn, "by_u_cmb", rows, closed, func(r burstRow) string { return r.u })
}

// waitIn waits until every stream has read at least n records.
func waitIn(ctx context.Context, t *testing.T, conn *pgx.Conn, n int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := conn.Query(ctx, "SHOW STREAMS")
		if err != nil {
			t.Fatal(err)
		}
		low := int64(-1)
		for res.Next() {
			vals, err := res.Values()
			if err != nil {
				t.Fatal(err)
			}
			if in := vals[5].(int64); low < 0 || in < low {
				low = in
			}
		}
		res.Close()
		if low >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("streams read %d records, want %d", low, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// showLate reads a stream's late_rows from SHOW STREAMS.
func showLate(ctx context.Context, t *testing.T, conn *pgx.Conn, name string) int64 {
	t.Helper()
	return showRow(ctx, t, conn, name)[7].(int64)
}

// checkPanes compares a stream's panes (g, ws, n, s; 10-second windows)
// with a GROUP BY computed here over rows: exactly one pane per group and
// window closed by the watermark closed, with its exact count and sum.
func checkPanes(ctx context.Context, t *testing.T, conn *pgx.Conn, stream string, rows []burstRow, closed time.Time, key func(burstRow) string) {
	t.Helper()
	checkPanesOf(ctx, t, conn, stream, fmt.Sprintf("SELECT g, ws, n, s FROM %s", stream), rows, closed, key)
}

// checkPanesOf is checkPanes with the query that reads the panes as (g, ws,
// n, s) rows: a keyless stream has no g of its own.
func checkPanesOf(ctx context.Context, t *testing.T, conn *pgx.Conn, stream, query string, rows []burstRow, closed time.Time, key func(burstRow) string) {
	t.Helper()
	type pane struct{ n, s int64 }
	want := map[string]pane{}
	for _, r := range rows {
		if r.ts.Truncate(10 * time.Second).Add(10 * time.Second).After(closed) {
			continue // its window is still open
		}
		id := key(r) + "@" + r.ts.Truncate(10*time.Second).Format(time.RFC3339)
		p := want[id]
		p.n++
		p.s += r.v
		want[id] = p
	}
	res, err := conn.Query(ctx, query)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	got := map[string]pane{}
	for res.Next() {
		var g string
		var ws time.Time
		var p pane
		if err := res.Scan(&g, &ws, &p.n, &p.s); err != nil {
			t.Fatal(err)
		}
		id := g + "@" + ws.UTC().Format(time.RFC3339)
		if _, dup := got[id]; dup {
			t.Errorf("%s: pane %s emitted twice", stream, id)
		}
		got[id] = p
	}
	for id, w := range want {
		if g, ok := got[id]; !ok || g != w {
			t.Errorf("%s: pane %s = %+v (emitted %v), want %+v", stream, id, g, ok, w)
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			t.Errorf("%s: unexpected pane %s", stream, id)
		}
	}
}

// TestQuietPartitionClosesItsWindow: in a local plan, one of 4 partitions
// goes quiet after a row in a window while the others keep advancing; its
// window still closes, without FLUSH, once its watermark has advanced with
// processing time past the window's end.
func TestQuietPartitionClosesItsWindow(t *testing.T) {
	parallel(t)
	ctx, _, conn := testSession(t, time.Minute)
	execAll(ctx, t, conn,
		`CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
			WITH (topic = 'ev', partitions = 4, partition_key = 'k', idle_timeout = INTERVAL '1' SECOND)`,
		`CREATE STREAM counts WITH (topic = 'counts') AS SELECT k, TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n
			FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '10' SECOND)`,
	)
	keys := keysByPartition(4, 1)
	quiet := keys[3][0]
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	send := func(k string, ts time.Duration) {
		t.Helper()
		q := fmt.Sprintf("INSERT INTO ev VALUES ('%s', TIMESTAMP '%s')", k, base.Add(ts).Format("2006-01-02 15:04:05"))
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	send(quiet, 8*time.Second) // its partition's watermark: 00:00:07
	start := time.Now()
	for i := 0; ; i++ {
		// The other partitions move on, far past the window.
		for _, ks := range keys[:3] {
			send(ks[0], time.Duration(10+i)*time.Second)
		}
		var n int64
		err := conn.QueryRow(ctx, "SELECT n FROM counts WHERE k = $1", quiet).Scan(&n)
		if err == nil {
			if n != 1 {
				t.Fatalf("the quiet partition's pane has n = %d, want 1", n)
			}
			// Idle after 1 s, then 3 s of processing time to pass 00:00:10.
			if waited := time.Since(start); waited < 3*time.Second {
				t.Fatalf("the quiet partition's window closed after %v: its watermark jumped", waited)
			}
			return
		}
		if err != pgx.ErrNoRows {
			t.Fatal(err)
		}
		if time.Since(start) > 20*time.Second {
			t.Fatal("the quiet partition's window never closed")
		}
		time.Sleep(250 * time.Millisecond)
	}
}
