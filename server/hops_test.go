package server

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/shuffle"
	"github.com/turbinesql/turbinesql/streamplan"
)

// TestCombineLatePartial redelivers a partial after its window closed (as
// a crash between shipping and committing would under at-least-once): the
// merge stage drops it, counts it in turbine_combine_late_partials_total,
// and the pane stays as it was emitted once, late_rows at 0. Then a
// partial of the same window whose cover header (dataflow.CoverHeader) says it
// carries two rows the pane never had (rows past those the source
// partition had shipped): dropped too, its two rows counted as late
// (late_rows, turbine_late_rows_total), not as a copy. Then the same
// partial without the header, as the previous release ships it: it says
// nothing of what it covers and is taken for a copy. It also checks the
// lag gauge names a source partition.
func TestCombineLatePartial(t *testing.T) {
	parallel(t)
	if testBrokers() != "" {
		isolateTopics(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := startTestServer(t, t.TempDir())
	defer srv.Close()
	conn := connect(ctx, t, srv)
	defer conn.Close(ctx)
	for _, q := range []string{
		`CREATE SOURCE tx (tenant TEXT, user_id TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'tx', partitions = 2, partition_key = 'tenant')`,
		`CREATE STREAM per_user WITH (topic = 'per_user', strategy = 'combine') AS SELECT user_id, COUNT(*) AS n FROM tx GROUP BY user_id, TUMBLE(ts, INTERVAL '10' SECOND)`,
		`INSERT INTO tx VALUES ('t1', 'u1', TIMESTAMP '2026-01-01 00:00:01'), ('t2', 'u1', TIMESTAMP '2026-01-01 00:00:02'), ('t3', 'u1', TIMESTAMP '2026-01-01 00:00:30')`,
		`FLUSH`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var partial *kgo.Record
	if err := srv.kafka.ReadAll(ctx, combineTopic(srv.cfg.AppID, "tx", "per_user"), func(r *kgo.Record) error {
		if !isMarker(r) && partial == nil {
			partial = r
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if partial == nil {
		t.Fatal("no partial on the combine topic")
	}
	again := &kgo.Record{Topic: partial.Topic, Partition: partial.Partition, Key: partial.Key, Value: partial.Value, Headers: partial.Headers}
	if err := srv.kafka.ProduceSync(ctx, []*kgo.Record{again}); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "FLUSH"); err != nil {
		t.Fatal(err)
	}
	var panes, n int64
	if err := conn.QueryRow(ctx, "SELECT COUNT(*), MAX(n) FROM per_user WHERE user_id = 'u1'").Scan(&panes, &n); err != nil {
		t.Fatal(err)
	}
	if panes != 1 || n != 2 {
		t.Fatalf("u1: %d panes, n = %d; want one pane of 2", panes, n)
	}
	var m dto.Metric
	if err := srv.metrics.CombineLatePartials.WithLabelValues("per_user").Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != 1 {
		t.Fatalf("turbine_combine_late_partials_total = %v, want 1", got)
	}
	latePartials := func() float64 {
		t.Helper()
		if err := srv.metrics.CombineLatePartials.WithLabelValues("per_user").Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	lateRows := func() float64 {
		t.Helper()
		if err := srv.metrics.LateRows.WithLabelValues("per_user", "dropped").Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	if late := showLate(ctx, t, conn, "per_user"); late != 0 || lateRows() != 0 {
		t.Fatalf("late_rows %d (metric %v) after a copy, want 0", late, lateRows())
	}
	var cover dataflow.PartialCover
	var covered bool
	for _, h := range partial.Headers {
		if h.Key == dataflow.CoverHeader {
			c, err := dataflow.DecodeCover(h.Value)
			if err != nil {
				t.Fatal(err)
			}
			cover, covered = c, true
		}
	}
	if !covered || cover.Last < 0 || cover.Rows == 0 {
		t.Fatalf("the partial's headers %v: want %s saying what it covers", partial.Headers, dataflow.CoverHeader)
	}
	var otherHeaders []kgo.RecordHeader
	for _, h := range partial.Headers {
		if h.Key != dataflow.CoverHeader {
			otherHeaders = append(otherHeaders, h)
		}
	}
	resend := func(headers []kgo.RecordHeader) {
		t.Helper()
		r := &kgo.Record{Topic: partial.Topic, Partition: partial.Partition, Key: partial.Key, Value: partial.Value, Headers: headers}
		if err := srv.kafka.ProduceSync(ctx, []*kgo.Record{r}); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "FLUSH"); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(ctx, "SELECT COUNT(*), MAX(n) FROM per_user WHERE user_id = 'u1'").Scan(&panes, &n); err != nil {
			t.Fatal(err)
		}
		if panes != 1 || n != 2 {
			t.Fatalf("u1 after a late partial: %d panes, n = %d; want the one pane of 2", panes, n)
		}
	}
	newer := dataflow.EncodeCover(dataflow.PartialCover{Last: cover.Last + 5, Rows: 2})
	resend(append(slices.Clone(otherHeaders), kgo.RecordHeader{Key: dataflow.CoverHeader, Value: newer}))
	if late := showLate(ctx, t, conn, "per_user"); late != 2 || lateRows() != 2 || latePartials() != 1 {
		t.Fatalf("after a partial with two new rows: late_rows %d, turbine_late_rows_total %v, turbine_combine_late_partials_total %v; want 2, 2 and still 1 (it is no copy)",
			late, lateRows(), latePartials())
	}
	resend(otherHeaders)
	if late := showLate(ctx, t, conn, "per_user"); late != 2 || latePartials() != 2 {
		t.Fatalf("after a partial without %s: late_rows %d, turbine_combine_late_partials_total %v; want 2 and 2 (taken for a copy)",
			dataflow.CoverHeader, late, latePartials())
	}
	// FLUSH made every source partition idle: nothing is waited on. New
	// input makes them active again, and the gauge names the slowest.
	if _, err := conn.Exec(ctx, `INSERT INTO tx VALUES ('t1', 'u2', TIMESTAMP '2026-01-01 00:00:40'), ('t2', 'u2', TIMESTAMP '2026-01-01 00:00:41')`); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !lagNamed(t, srv) {
		if time.Now().After(deadline) {
			t.Fatal("turbine_combine_min_watermark_lag_seconds does not name a source partition")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func isMarker(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == shuffle.MarkerHeader {
			return true
		}
	}
	return false
}

func lagNamed(t *testing.T, srv *Server) bool {
	fams, err := srv.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "turbine_combine_min_watermark_lag_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "source_partition" {
					return true
				}
			}
		}
	}
	return false
}

// TestInternalTopicCountMismatch: a hop's internal topic that exists with
// another partition count is refused, naming the topic and what to do.
func TestInternalTopicCountMismatch(t *testing.T) {
	if testBrokers() != "" {
		isolateTopics(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := startTestServer(t, t.TempDir())
	defer srv.Close()
	conn := connect(ctx, t, srv)
	defer conn.Close(ctx)
	rep := streamplan.RepartitionTopic(srv.cfg.AppID, "tx", []string{"user_id"})
	if _, err := conn.Exec(ctx, `CREATE SOURCE tx (tenant TEXT, user_id TEXT, ts TIMESTAMP) WITH (topic = 'tx', partitions = 4, partition_key = 'tenant')`); err != nil {
		t.Fatal(err)
	}
	// Someone made the hop's topic with another count (SQL cannot: it is
	// internal).
	if _, err := srv.kafka.EnsureTopic(ctx, rep, 2, nil); err != nil {
		t.Fatal(err)
	}
	_, err := conn.Exec(ctx, `CREATE STREAM by_user WITH (strategy = 'repartition') AS SELECT user_id, COUNT(*) AS n FROM tx GROUP BY user_id`)
	if err == nil || !strings.Contains(err.Error(), "exists with 2 partitions, not 4") || !strings.Contains(err.Error(), "22023") {
		t.Fatalf("got %v, want the count mismatch refused (22023)", err)
	}
}

// TestCostChoiceSurvivesRestart: the cost rule decides when a stream is
// created; a restart, which plans the stream again over data that would
// now tip the rule the other way, keeps the recorded choice.
func TestCostChoiceSurvivesRestart(t *testing.T) {
	parallel(t)
	if testBrokers() != "" {
		isolateTopics(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	srv := startTestServer(t, dir)
	conn := connect(ctx, t, srv)
	for _, q := range []string{
		`CREATE SOURCE tx (tenant TEXT, user_id TEXT, x BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'tx', partitions = 2, partition_key = 'tenant')`,
		// Nothing to sample: combine.
		`CREATE STREAM per_user WITH (topic = 'per_user') AS SELECT user_id, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS a, VAR_SAMP(x) AS v, STDDEV_POP(x) AS sd, CORR(x, x) AS c, APPROX_MEDIAN(x) AS med, APPROX_COUNT_DISTINCT(x) AS d FROM tx GROUP BY user_id, TUMBLE(ts, INTERVAL '1' MINUTE)`,
		// Every row its own key: now the rule would pick repartition.
		`INSERT INTO tx VALUES ('t1', 'u1', 1, TIMESTAMP '2026-01-01 00:00:01'), ('t1', 'u2', 2, TIMESTAMP '2026-01-01 00:00:02'), ('t1', 'u3', 3, TIMESTAMP '2026-01-01 00:00:03')`,
		`FLUSH`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	strategy := func() string {
		rows, err := conn.Query(ctx, "SHOW STREAMS")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var s string
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			s = vals[3].(string) // name, input, topic, strategy, ...
		}
		return s
	}
	if got := strategy(); got != "combine" {
		t.Fatalf("strategy %q at creation, want combine", got)
	}
	conn.Close(ctx)
	srv.Close()
	srv = startTestServer(t, dir)
	defer srv.Close()
	conn = connect(ctx, t, srv)
	defer conn.Close(ctx)
	if got := strategy(); got != "combine" {
		t.Fatalf("strategy %q after a restart, want the recorded combine", got)
	}
	var plan []string
	rows, err := conn.Query(ctx, `EXPLAIN CREATE STREAM other AS SELECT user_id, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS a, VAR_SAMP(x) AS v, STDDEV_POP(x) AS sd, CORR(x, x) AS c, APPROX_MEDIAN(x) AS med, APPROX_COUNT_DISTINCT(x) AS d FROM tx GROUP BY user_id, TUMBLE(ts, INTERVAL '1' MINUTE)`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, l)
	}
	rows.Close()
	if len(plan) == 0 || !strings.HasPrefix(plan[0], "Strategy: repartition") {
		t.Fatalf("a new stream over the same data: %v; want the cost rule to pick repartition now", plan)
	}
}
