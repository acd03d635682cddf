package server

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestFlushCoversEveryNode: FLUSH on one server returns once every task of
// the app has processed its input, closed what that closes and committed,
// on whichever server runs it. Two servers share a local, a repartition
// and a combine stream (4 partitions each, split between them) and commit
// only when asked (a commit interval of minutes), so a pane shows up only
// once a FLUSH reached the task that holds it. Only one partition moves on
// to 00:02; the others read their end and close on its watermark, which
// for most of them runs on the other server. FLUSH runs on one server
// only, and right after it every pane of [00:00, 00:01) is there once,
// exact, read read_committed.
func TestFlushCoversEveryNode(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	addr, start := appNodes(t, 4, "barrier", func(c *Config) { c.CommitInterval = 10 * time.Minute })
	a := start(t.TempDir())
	defer func() { a.Close() }()
	ca := connect(ctx, t, a)
	defer ca.Close(ctx)
	execAll(ctx, t, ca,
		`CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 4, partition_key = 'k')`)
	streams := []string{"loc", "rep", "cmb"}
	for _, s := range []struct{ name, opts string }{
		{"loc", `processing_guarantee = 'exactly_once'`},
		{"rep", `processing_guarantee = 'exactly_once', strategy = 'repartition'`},
		{"cmb", `strategy = 'combine'`},
	} {
		execAll(ctx, t, ca, fmt.Sprintf(`CREATE STREAM %s WITH (%s) AS
			SELECT k, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`, s.name, s.opts))
	}
	b := start(t.TempDir())
	defer func() { b.Close() }()
	for _, s := range streams {
		waitOwned(t, "both servers to own partitions of "+s, func() bool {
			na, nb := owned(a, s), owned(b, s)
			return na > 0 && nb > 0 && na+nb == 4
		})
	}

	prod, err := kgo.NewClient(kgo.SeedBrokers(addr...), kgo.DefaultProduceTopic("ev"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	keys := keysByPartition(4, 2)
	want := map[string]bool{}
	var recs []*kgo.Record
	for p, ks := range keys {
		for i, k := range ks {
			for j := 0; j <= i+1; j++ {
				ts := fmt.Sprintf("2026-01-01T00:00:%02dZ", 5+20*j)
				recs = append(recs, &kgo.Record{Partition: int32(p), Key: []byte(k), Value: []byte(fmt.Sprintf(`{"k":%q,"ts":%q}`, k, ts))})
			}
			want[fmt.Sprintf(`{"k":%q,"ws":"2026-01-01T00:00:00Z","n":%d}`, k, i+2)] = true
		}
	}
	// One partition moves on; its window [00:02, 00:03) stays open.
	recs = append(recs, &kgo.Record{Partition: 2, Key: []byte(keys[2][0]), Value: []byte(fmt.Sprintf(`{"k":%q,"ts":"2026-01-01T00:02:00Z"}`, keys[2][0]))})
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	cb := connect(ctx, t, b)
	defer cb.Close(ctx)
	execAll(ctx, t, cb, "FLUSH")
	for _, s := range streams {
		got := readOutput(ctx, t, addr, s, true)
		sort.Strings(got)
		seen := map[string]bool{}
		for _, v := range got {
			if !want[v] || seen[v] {
				t.Errorf("%s: unexpected or repeated pane %s", s, v)
			}
			seen[v] = true
		}
		if len(seen) != len(want) {
			t.Errorf("%s: %d of %d panes right after FLUSH on one server: %v", s, len(seen), len(want), got)
		}
	}
}

// TestStandbyTakesOverWithoutFullRestore: with --standby-replicas 1, a
// server keeps a warm copy of the partitions the other one runs, applying
// their changelog as it is committed. When the other stops, the copy
// becomes the task: the restore reads only what the copy had not applied
// (here nothing or a few records) instead of the whole changelog, and
// every pane is still exact.
func TestStandbyTakesOverWithoutFullRestore(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	addr, start := appNodes(t, 2, "standby", func(c *Config) { c.StandbyReplicas = 1 })
	a := start(t.TempDir())
	closeA := closeOnce(t, a)
	ca := connect(ctx, t, a)
	execAll(ctx, t, ca,
		`CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 2, partition_key = 'k')`,
		`CREATE STREAM w WITH (processing_guarantee = 'exactly_once') AS
			SELECT k, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`)
	ca.Close(ctx)
	b := start(t.TempDir())
	defer func() { b.Close() }()
	waitOwned(t, "one partition on each server", func() bool { return owned(a, "w") == 1 && owned(b, "w") == 1 })

	prod, err := kgo.NewClient(kgo.SeedBrokers(addr...), kgo.DefaultProduceTopic("ev"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const perPart = 1500
	keys := keysByPartition(2, perPart)
	var recs []*kgo.Record
	for p, ks := range keys {
		for _, k := range ks {
			recs = append(recs, &kgo.Record{Partition: int32(p), Key: []byte(k), Value: []byte(fmt.Sprintf(`{"k":%q,"ts":"2026-01-01T00:00:30Z"}`, k))})
		}
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// Each server's copy of the other's partition holds a group per key.
	for _, srv := range []*Server{a, b} {
		waitOwned(t, "a warm copy on "+srv.nodeID, func() bool {
			return testutil.ToFloat64(srv.metrics.StandbyRecords.WithLabelValues("w")) >= perPart
		})
	}
	// SHOW CLUSTER counts each server's copies (heartbeats, every second).
	cb0 := connect(ctx, t, b)
	waitOwned(t, "SHOW CLUSTER to count a standby copy on each server", func() bool {
		rows, err := cb0.Query(ctx, "SHOW CLUSTER")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		copies := map[string]int64{}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			copies[vals[0].(string)] = vals[4].(int64)
		}
		return copies[a.nodeID] == 1 && copies[b.nodeID] == 1
	})
	cb0.Close(ctx)
	before := testutil.ToFloat64(b.metrics.RestoredRecords.WithLabelValues("w"))
	closeA()
	waitOwned(t, "b to take a's partition over", func() bool { return owned(b, "w") == 2 })
	restored := testutil.ToFloat64(b.metrics.RestoredRecords.WithLabelValues("w")) - before
	t.Logf("b restored %v changelog records at the takeover; its copy had applied %v", restored, testutil.ToFloat64(b.metrics.StandbyRecords.WithLabelValues("w")))
	if restored > perPart/10 {
		t.Errorf("b restored %v changelog records when it took the partition over, though its copy was warm", restored)
	}
	var end []*kgo.Record
	for p, ks := range keys {
		end = append(end, &kgo.Record{Partition: int32(p), Key: []byte(ks[0]), Value: []byte(fmt.Sprintf(`{"k":%q,"ts":"2026-01-01T00:02:00Z"}`, ks[0]))})
	}
	if err := prod.ProduceSync(ctx, end...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cb := connect(ctx, t, b)
	defer cb.Close(ctx)
	execAll(ctx, t, cb, "FLUSH")
	seen := map[string]bool{}
	for _, v := range readOutput(ctx, t, addr, "w", true) {
		if seen[v] {
			t.Errorf("pane %s written twice", v)
		}
		seen[v] = true
	}
	for _, ks := range keys {
		for _, k := range ks {
			if v := fmt.Sprintf(`{"k":%q,"ws":"2026-01-01T00:00:00Z","n":1}`, k); !seen[v] {
				t.Fatalf("pane %s missing (%d panes)", v, len(seen))
			}
		}
	}
	if len(seen) != 2*perPart {
		t.Errorf("%d panes, want %d", len(seen), 2*perPart)
	}
}

// TestLongRestoreRunsOutsideTheRebalance: a server taking over a
// partition whose changelog holds more than dataflow's background restore
// threshold restores it in the background, the partition held (not read)
// meanwhile, instead of inside the group's assignment; a FLUSH on it waits
// for the restore, and every pane is exact after.
func TestLongRestoreRunsOutsideTheRebalance(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	addr, start := appNodes(t, 1, "restore")
	a := start(t.TempDir())
	closeA := closeOnce(t, a)
	ca := connect(ctx, t, a)
	execAll(ctx, t, ca,
		`CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 1, partition_key = 'k')`,
		`CREATE STREAM w AS SELECT k, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`)
	prod, err := kgo.NewClient(kgo.SeedBrokers(addr...), kgo.DefaultProduceTopic("ev"), kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const keys = 30_000 // a changelog record each: past the threshold
	var recs []*kgo.Record
	for i := 0; i < keys; i++ {
		recs = append(recs, &kgo.Record{Value: []byte(fmt.Sprintf(`{"k":"k%d","ts":"2026-01-01T00:00:30Z"}`, i))})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	execAll(ctx, t, ca, "FLUSH")
	ca.Close(ctx)
	b := start(t.TempDir()) // an empty disk: it restores the whole changelog
	defer func() { b.Close() }()
	closeA()
	sawHeld := false
	waitOwned(t, "b to run the partition", func() bool {
		b.mu.Lock()
		r := b.streams["w"]
		b.mu.Unlock()
		if r != nil && r.final != nil && len(r.final.Restoring()) > 0 {
			sawHeld = true
		}
		return owned(b, "w") == 1
	})
	if !sawHeld {
		t.Error("the partition opened without a background restore")
	}
	if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte(`{"k":"k0","ts":"2026-01-01T00:02:00Z"}`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cb := connect(ctx, t, b)
	defer cb.Close(ctx)
	execAll(ctx, t, cb, "FLUSH")
	seen := map[string]bool{}
	for _, v := range readOutput(ctx, t, addr, "w", false) {
		seen[v] = true
	}
	for i := 0; i < keys; i++ {
		if v := fmt.Sprintf(`{"k":"k%d","ws":"2026-01-01T00:00:00Z","n":1}`, i); !seen[v] {
			t.Fatalf("pane %s missing (%d panes)", v, len(seen))
		}
	}
	if len(seen) != keys {
		t.Errorf("%d panes, want %d", len(seen), keys)
	}
}

// closeOnce closes srv when called, or at the end of the test if it was
// not.
func closeOnce(t *testing.T, srv *Server) func() {
	var once sync.Once
	stop := func() { once.Do(srv.Close) }
	t.Cleanup(stop)
	return stop
}
