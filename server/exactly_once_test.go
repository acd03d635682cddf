package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/kafkaio"
)

// TestExactlyOnceCatchesUpAfterStateLag puts every stage of a stream in
// the seed's residual state: a transaction committed a window's pane and
// the input after it, but the state never recorded it (the process died
// between the two). It does so by rolling the state directory back to a
// copy taken one commit earlier.
//
// With the changelog, the state catches up from it before anything runs:
// every stream, exactly-once or not, writes every pane once, and the
// rolled-back disk counts the records it restored.
//
// Without it (the changelog topics deleted: the defence behind it), the
// exactly-once streams (local, repartition, combine) replay that input into
// their state without writing anything, retire the window instead of
// closing it again, and go on: every pane exactly once, and the next
// window counts the replayed rows. The at-least-once stream beside them,
// from the same rolled-back state, writes the first pane a second time:
// the defect exactly-once removes.
func TestExactlyOnceCatchesUpAfterStateLag(t *testing.T) {
	parallel(t)
	t.Run("changelog", func(t *testing.T) { stateLag(t, true) })
	t.Run("no changelog", func(t *testing.T) { stateLag(t, false) })
}

func stateLag(t *testing.T, changelog bool) {
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

	if !changelog {
		deleteChangelogs(ctx, t, dir, srv.cfg.AppID)
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
	counter := func(c *prometheus.CounterVec, name string) float64 {
		var m dto.Metric
		if err := c.WithLabelValues(name).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	for name := range streams {
		if got := panes(name); !slices.Equal(got, want) {
			t.Errorf("%s (exactly-once): panes %v, want %v", name, got, want)
		}
		retired := counter(srv.metrics.RecoveredTimers, name)
		switch {
		case changelog && retired != 0:
			t.Errorf("%s: %v windows retired by a replay, though the changelog brought the state up to date", name, retired)
		case !changelog && retired < 1:
			t.Errorf("%s: turbine_recovered_due_timers_total = %v, want the retired window counted", name, retired)
		}
	}
	// The counters rolled back with the state and were counted again by
	// the replay (exactly-once) or the re-read (at-least-once), once: 5
	// records read, 2 panes written (at-least-once wrote its first pane
	// twice, and its state recorded one of them).
	counts := showCounters(ctx, t, conn)
	for name := range streams {
		if c := counts[name]; c != (dataflow.Counters{In: 5, Out: 2}) {
			t.Errorf("%s (exactly-once): SHOW STREAMS counts %+v, want 5 read and 2 written", name, c)
		}
	}
	if c := counts["alo"]; c != (dataflow.Counters{In: 5, Out: 2}) {
		t.Errorf("alo (at-least-once): SHOW STREAMS counts %+v, want 5 read and 2 written", c)
	}
	if !changelog {
		if got := panes("alo"); !slices.Equal(got, []string{"a 00:00:00 2", "a 00:00:00 2", "a 00:00:10 2"}) {
			t.Errorf("alo (at-least-once) from the same state: panes %v, want the first written twice", got)
		}
		return
	}
	if got := panes("alo"); !slices.Equal(got, want) {
		t.Errorf("alo (at-least-once) caught up from its changelog: panes %v, want %v", got, want)
	}
	for _, name := range []string{"loc", "alo"} {
		if n := counter(srv.metrics.RestoredRecords, name); n == 0 {
			t.Errorf("%s: nothing restored from the changelog onto the rolled-back disk", name)
		}
	}
}

// deleteChangelogs deletes every changelog topic of app, whose stopped
// server's data dir is dir (its embedded broker, or the shared one).
func deleteChangelogs(ctx context.Context, t *testing.T, dir, app string) {
	t.Helper()
	opts := []kgo.Opt{kgo.MetadataMinAge(10 * time.Millisecond)}
	if testBrokers() != "" {
		conn := testKafkaConn()
		if err := conn.Validate(); err != nil { // TLS and SASL options
			t.Fatal(err)
		}
		opts = conn.Opts(opts...)
	} else {
		b, err := kafkaio.StartEmbedded("127.0.0.1:0", filepath.Join(dir, "kafka"))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		opts = append(opts, kgo.SeedBrokers(b.ListenAddrs()...))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var logs []string
	for _, name := range topics.Names() {
		if strings.HasPrefix(name, "turbine-"+app+"-") && strings.HasSuffix(name, "-changelog") {
			logs = append(logs, name)
		}
	}
	if len(logs) < 5 {
		t.Fatalf("changelog topics %v: want one per stage (loc, rep and its hop, cmb and its pre-aggregation, alo)", logs)
	}
	if _, err := adm.DeleteTopics(ctx, logs...); err != nil {
		t.Fatal(err)
	}
}

// readOutput reads every record of topic with the isolation level given:
// read_committed sees what committed transactions wrote, read_uncommitted
// also what aborted ones did.
func readOutput(ctx context.Context, t *testing.T, brokers []string, topic string, committed bool) []string {
	t.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200 * time.Millisecond)}
	if committed {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []string
	deadline := time.Now().Add(3 * time.Second) // long enough for every fetch to come back
	for time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) { out = append(out, string(r.Value)) })
	}
	return out
}

// TestExactlyOnceAbortsOnError: a record that cannot be decoded fails an
// exactly-once stream (on_error 'fail') in the middle of a transaction
// that already holds the output of an earlier record. The transaction is
// aborted: a read_committed reader sees nothing, a read_uncommitted one
// sees the aborted record, and no offset moved.
func TestExactlyOnceAbortsOnError(t *testing.T) {
	parallel(t)
	if testBrokers() != "" {
		isolateTopics(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A long commit interval keeps the first record's output in the open
	// transaction when the bad record arrives.
	srv := startTestServer(t, t.TempDir(), func(c *Config) { c.CommitInterval = 20 * time.Second })
	defer srv.Close()
	conn := connect(ctx, t, srv)
	defer conn.Close(ctx)
	for _, q := range []string{
		`CREATE SOURCE raw (k TEXT, x TEXT) WITH (topic = 'mixed', partitions = 1, partition_key = 'k')`,
		`CREATE SOURCE strict_src (k TEXT, x BIGINT) WITH (topic = 'mixed', partition_key = 'k')`,
		`CREATE STREAM doubled WITH (processing_guarantee = 'exactly_once') AS SELECT k, x * 2 AS y FROM strict_src`,
		// A chained stream reads doubled's output read_committed.
		`CREATE STREAM chained AS SELECT k, y + 1 AS z FROM doubled`,
		`INSERT INTO strict_src VALUES ('a', 21)`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	brokers := srv.KafkaAddrs()
	waitFor(t, 10*time.Second, "the first record's output, uncommitted", func() bool {
		return len(readOutput(ctx, t, brokers, "doubled", false)) == 1
	})
	if _, err := conn.Exec(ctx, `INSERT INTO raw VALUES ('a', 'oops')`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the stream to fail", func() bool {
		st, _ := streamStatus(ctx, t, conn, "doubled")
		return st == "failed"
	})
	if got := readOutput(ctx, t, brokers, "doubled", true); len(got) != 0 {
		t.Errorf("read_committed sees %v: the aborted transaction's output became visible", got)
	}
	if got := readOutput(ctx, t, brokers, "doubled", false); len(got) != 1 || got[0] != `{"k":"a","y":42}` {
		t.Errorf("read_uncommitted sees %v, want the one aborted record", got)
	}
	// FLUSH completes the chained stream (and reports doubled's failure):
	// it read nothing of the aborted transaction.
	if _, err := conn.Exec(ctx, `FLUSH`); err == nil || !strings.Contains(err.Error(), "doubled") {
		t.Errorf("FLUSH: %v, want doubled's failure reported", err)
	}
	if got := readOutput(ctx, t, brokers, "chained", false); len(got) != 0 {
		t.Errorf("the chained stream wrote %v from an aborted transaction", got)
	}
	offs, err := srv.kafka.StableOffsets(ctx, srv.groupName("doubled"), "mixed")
	if err != nil {
		t.Fatal(err)
	}
	if offs[0].Offset != 0 {
		t.Errorf("committed offsets %v: an aborted transaction must move none (the start's commit left 0)", offs)
	}
}

// TestFencedTaskRejoins: a second server with the same app id
// (here on its own data dir) joins the stream's consumer group and, the one
// partition staying where it is, runs nothing of it. Then the partition's
// transactional id is opened elsewhere, as the group's next owner does
// when a rebalance this process joined late moved the partition. The
// first server's next commit fails fenced; the stream does not stay
// failed (in an app of several processes this is a routine move, not a
// fault): it starts again and rejoins its group, which decides who runs
// the partition, while the server's other stream keeps running. Every
// pane comes out once (exactly-once), or at least once (at-least-once:
// its tasks commit changelog and offsets in transactions of the same ids,
// so they are fenced alike).
func TestFencedTaskRejoins(t *testing.T) {
	parallel(t)
	for _, guarantee := range []string{"exactly_once", "at_least_once"} {
		t.Run(guarantee, func(t *testing.T) { testFencedTaskRejoins(t, guarantee) })
	}
}

func testFencedTaskRejoins(t *testing.T, guarantee string) {
	ctx, a, ca := testSession(t, 90*time.Second)
	execAll(ctx, t, ca,
		`CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 1, partition_key = 'k')`,
		`CREATE SOURCE other (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'other', partitions = 1, partition_key = 'k')`,
		`CREATE STREAM counts WITH (processing_guarantee = '`+guarantee+`') AS SELECT k, TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '10' SECOND)`,
		`CREATE STREAM others AS SELECT k, COUNT(*) AS n FROM other GROUP BY k`,
		`INSERT INTO ev VALUES ('a', TIMESTAMP '2026-01-01 00:00:01'), ('a', TIMESTAMP '2026-01-01 00:00:12')`,
		`FLUSH`)
	b := startTestServer(t, t.TempDir(), func(c *Config) { c.Brokers = a.KafkaAddrs() })
	defer b.Close()
	cb := connect(ctx, t, b)
	defer cb.Close(ctx)
	if owned(a, "counts") != 1 || owned(b, "counts") != 0 {
		t.Fatalf("partitions of counts: %d on the first server, %d on the second; want the one where it was", owned(a, "counts"), owned(b, "counts"))
	}
	zombie, err := a.kafka.NewTxnProducer(ctx, a.groupName("counts")+"-0", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	zombie.Close()
	if _, err := cb.Exec(ctx, `INSERT INTO ev VALUES ('a', TIMESTAMP '2026-01-01 00:00:13'), ('a', TIMESTAMP '2026-01-01 00:00:25')`); err != nil {
		t.Fatal(err)
	}
	restarts := func() int { return restartsOf(a, "stream counts") }
	waitFor(t, 30*time.Second, "the first server's fenced stream to start again", func() bool {
		st, _ := streamStatus(ctx, t, ca, "counts")
		return restarts() > 0 && st == "running"
	})
	if st, _ := streamStatus(ctx, t, ca, "others"); st != "running" {
		t.Errorf("the first server's other stream is %s, want running", st)
	}
	waitOwned(t, "one of the two servers to run the partition", func() bool { return owned(a, "counts")+owned(b, "counts") == 1 })
	if _, err := cb.Exec(ctx, `FLUSH`); err != nil {
		t.Fatal(err)
	}
	checkPanes := func(want ...string) {
		t.Helper()
		rows, err := cb.Query(ctx, `SELECT ws, n FROM counts ORDER BY ws`)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for rows.Next() {
			var ws time.Time
			var n int64
			if err := rows.Scan(&ws, &n); err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprintf("%s %d", ws.UTC().Format("15:04:05"), n))
		}
		rows.Close()
		if guarantee == "at_least_once" {
			got = slices.Compact(got) // a pane may come again
		}
		if !slices.Equal(got, want) {
			t.Errorf("panes %v, want %v (%s)", got, want, guarantee)
		}
	}
	checkPanes("00:00:00 1", "00:00:10 2")

	// Fenced again, this time with a FLUSH right behind the input that
	// makes the holder commit: the FLUSH meets the fenced task, and rides
	// out its restart and the group's move rather than report a failure
	// that mends itself (as Kafka Streams rejoins on TaskMigrated).
	zombie, err = a.kafka.NewTxnProducer(ctx, a.groupName("counts")+"-0", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	zombie.Close()
	if _, err := cb.Exec(ctx, `INSERT INTO ev VALUES ('a', TIMESTAMP '2026-01-01 00:00:31'), ('a', TIMESTAMP '2026-01-01 00:00:45')`); err != nil {
		t.Fatal(err)
	}
	if _, err := cb.Exec(ctx, `FLUSH`); err != nil {
		t.Fatalf("FLUSH while the partition's holder is fenced: %v", err)
	}
	checkPanes("00:00:00 1", "00:00:10 2", "00:00:20 1", "00:00:30 1")
}

// TestFlushWaitsForAbortedCommitRecovery: the broker refuses one
// exactly-once task's produce (OUT_OF_ORDER_SEQUENCE_NUMBER, as a broker
// can after its own restart). The transaction aborts, the stream
// restarts itself from its state, and a FLUSH running meanwhile waits for
// that and succeeds: every pane once, for read_committed readers.
func TestFlushWaitsForAbortedCommitRecovery(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	var armed, refused atomic.Bool
	cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		r := req.(*kmsg.ProduceRequest)
		if !armed.Load() || r.TransactionID == nil || !strings.HasSuffix(*r.TransactionID, "-0") {
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.OutOfOrderSequenceNumber.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		if !armed.CompareAndSwap(true, false) {
			return nil, nil, false
		}
		refused.Store(true)
		return resp, nil, true
	})
	addr := cluster.ListenAddrs()
	srv := startTestServer(t, t.TempDir(), func(c *Config) { c.Brokers = addr; c.AppID = "abort" })
	defer srv.Close()
	conn := connect(ctx, t, srv)
	defer conn.Close(ctx)
	for _, q := range []string{
		`CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 1, partition_key = 'k')`,
		`CREATE STREAM w WITH (processing_guarantee = 'exactly_once') AS
			SELECT k, TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '10' SECOND)`,
		`INSERT INTO ev VALUES ('a', TIMESTAMP '2026-01-01 00:00:01'), ('a', TIMESTAMP '2026-01-01 00:00:02')`,
		`FLUSH`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	armed.Store(true)
	for _, q := range []string{
		`INSERT INTO ev VALUES ('a', TIMESTAMP '2026-01-01 00:00:12'), ('a', TIMESTAMP '2026-01-01 00:00:13'), ('a', TIMESTAMP '2026-01-01 00:00:25')`,
		`FLUSH`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if !refused.Load() {
		t.Fatal("no commit was refused: the test injected nothing")
	}
	var got []string
	for _, v := range readOutput(ctx, t, addr, "w", true) {
		var pane struct {
			WS string `json:"ws"`
			N  int64  `json:"n"`
		}
		if err := json.Unmarshal([]byte(v), &pane); err != nil {
			t.Fatalf("pane %s: %v", v, err)
		}
		got = append(got, fmt.Sprintf("%s %d", pane.WS, pane.N))
	}
	slices.Sort(got)
	want := []string{"2026-01-01T00:00:00Z 2", "2026-01-01T00:00:10Z 2"}
	if !slices.Equal(got, want) {
		t.Fatalf("read_committed panes %v, want %v", got, want)
	}
}

// TestExactlyOnceFencedHopRejoins: the exactly-once repartition hop in
// front of a stream is fenced (its partition's transactional id opened
// elsewhere, as a rebalance that moved the partition does). The hop starts
// again and rejoins its group, the stream behind it goes on, and every
// pane comes out once.
func TestExactlyOnceFencedHopRejoins(t *testing.T) {
	parallel(t)
	ctx, a, ca := testSession(t, 90*time.Second)
	execAll(ctx, t, ca,
		`CREATE SOURCE ev (k TEXT, u TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 1, partition_key = 'k')`,
		`CREATE STREAM per_u WITH (processing_guarantee = 'exactly_once', strategy = 'repartition') AS SELECT u, TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n FROM ev GROUP BY u, TUMBLE(ts, INTERVAL '10' SECOND)`,
		`INSERT INTO ev VALUES ('a', 'x', TIMESTAMP '2026-01-01 00:00:01'), ('b', 'x', TIMESTAMP '2026-01-01 00:00:12')`,
		`FLUSH`)
	a.mu.Lock()
	h := a.streams["per_u"].hop
	a.mu.Unlock()
	if h == nil {
		t.Fatal("per_u has no repartition hop")
	}
	zombie, err := a.kafka.NewTxnProducer(ctx, h.cfg.Group+"-0", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	zombie.Close()
	if _, err := ca.Exec(ctx, `INSERT INTO ev VALUES ('c', 'x', TIMESTAMP '2026-01-01 00:00:13'), ('d', 'x', TIMESTAMP '2026-01-01 00:00:25')`); err != nil {
		t.Fatal(err)
	}
	restarts := func() int { return restartsOf(a, "hop "+h.topic) }
	waitFor(t, 30*time.Second, "the fenced hop to start again", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return restarts() > 0 && h.stage.Err() == nil
	})
	if _, err := ca.Exec(ctx, `FLUSH`); err != nil {
		t.Fatal(err)
	}
	rows, err := ca.Query(ctx, `SELECT u, ws, n FROM per_u ORDER BY ws`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var u string
		var ws time.Time
		var n int64
		if err := rows.Scan(&u, &ws, &n); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %s %d", u, ws.UTC().Format("15:04:05"), n))
	}
	rows.Close()
	if want := []string{"x 00:00:00 1", "x 00:00:10 2"}; !slices.Equal(got, want) {
		t.Errorf("panes %v, want %v (each once)", got, want)
	}
}

// restartsOf is how many times in a row srv restarted a failed stream
// ("stream NAME") or hop ("hop TOPIC") lately (recoverStream, recoverHop).
func restartsOf(srv *Server, name string) int {
	srv.recovering.mu.Lock()
	defer srv.recovering.mu.Unlock()
	if rc := srv.recovering.runs[name]; rc != nil {
		return rc.n
	}
	return 0
}
