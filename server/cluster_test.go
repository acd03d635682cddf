package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// owned is how many partitions of stream's last stage run on srv.
func owned(srv *Server, stream string) int {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	r, ok := srv.streams[stream]
	if !ok || r.final == nil {
		return 0
	}
	return r.final.Partitions()
}

// ownedHop is how many partitions of the repartition hop in front of
// stream srv runs.
func ownedHop(srv *Server, stream string) int {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	r, ok := srv.streams[stream]
	if !ok || r.hop == nil || r.hop.stage == nil {
		return 0
	}
	return r.hop.stage.Partitions()
}

// waitOwned waits until cond holds of the partitions each server owns.
func waitOwned(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// appNodes starts a broker of its own whose topic ev has parts
// partitions, and returns its address and how to start a server of app
// on it (committing every 50 ms) on a data dir. The broker stops after
// the test, and so after the servers the test closes.
func appNodes(t *testing.T, parts int, app string, mods ...func(*Config)) ([]string, func(dir string) *Server) {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(parts), "ev"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	addr := cluster.ListenAddrs()
	return addr, func(dir string) *Server {
		return startTestServer(t, dir, append([]func(*Config){func(c *Config) {
			c.Brokers, c.AppID, c.CommitInterval = addr, app, 50*time.Millisecond
		}}, mods...)...)
	}
}

// TestNodesShareStreamsAndStateMoves: two servers with one app id share
// each stream's partitions through its consumer group instead of both
// running everything; when one stops, the other takes its partitions
// over; a node that comes back on an empty disk takes partitions back and
// restores their state from the changelog. Input keeps arriving
// throughout, and at the end every window's pane is there once, with the
// count the input gives, read read_committed, for a local and a
// repartitioned exactly-once stream and a local at-least-once one.
func TestNodesShareStreamsAndStateMoves(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	addr, start := appNodes(t, 4, "pair", func(c *Config) { c.SessionTimeout = 6 * time.Second })
	a := start(t.TempDir())
	conn := connect(ctx, t, a)
	execAll(ctx, t, conn,
		`CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 4, partition_key = 'k')`,
		`CREATE STREAM w WITH (processing_guarantee = 'exactly_once') AS
			SELECT k, TUMBLE_START(ts, INTERVAL '1' SECOND) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' SECOND)`,
		`CREATE STREAM wr WITH (processing_guarantee = 'exactly_once', strategy = 'repartition') AS
			SELECT k, TUMBLE_START(ts, INTERVAL '1' SECOND) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' SECOND)`,
		`CREATE STREAM wa AS
			SELECT k, TUMBLE_START(ts, INTERVAL '1' SECOND) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' SECOND)`)
	conn.Close(ctx)
	b := start(t.TempDir())
	defer func() { b.Close() }()
	for _, s := range []string{"w", "wr", "wa"} {
		waitOwned(t, "both nodes to own partitions of "+s, func() bool {
			na, nb := owned(a, s), owned(b, s)
			return na > 0 && nb > 0 && na+nb == 4
		})
	}

	// The hop in front of wr has its own group, which may still be
	// settling (a cooperative rebalance takes two rounds) when the output
	// stages' groups have.
	waitOwned(t, "both nodes to own partitions of wr's hop", func() bool {
		na, nb := ownedHop(a, "wr"), ownedHop(b, "wr")
		return na > 0 && nb > 0 && na+nb == 4
	})

	// SHOW TASKS on either node names the node of every task, as the
	// groups assigned them.
	for _, srv := range []*Server{a, b} {
		c := connect(ctx, t, srv)
		rows, err := c.Query(ctx, "SHOW TASKS wr")
		if err != nil {
			t.Fatal(err)
		}
		nodes, stages, here := map[string]int{}, map[string]int{}, 0
		for rows.Next() {
			var stage, group string
			var p int64
			var node, standbys *string
			var local bool
			if err := rows.Scan(&stage, &p, &node, &local, &group, &standbys); err != nil {
				t.Fatal(err)
			}
			if node == nil {
				t.Errorf("SHOW TASKS wr: %s partition %d has no node", stage, p)
				continue
			}
			nodes[*node]++
			stages[stage]++
			if local != (*node == srv.nodeID) {
				t.Errorf("SHOW TASKS wr on %s: %s partition %d on %s, on_this_node %v", srv.nodeID, stage, p, *node, local)
			}
			if local {
				here++
			}
		}
		rows.Close()
		c.Close(ctx)
		if len(stages) != 2 || nodes[a.nodeID] == 0 || nodes[b.nodeID] == 0 || nodes[a.nodeID]+nodes[b.nodeID] != 8 || here == 0 {
			t.Errorf("SHOW TASKS wr on %s: stages %v, nodes %v (a %s, b %s)", srv.nodeID, stages, nodes, a.nodeID, b.nodeID)
		}
	}

	in := startPaneInput(ctx, t, addr, 5, 30, func(i int) string { return fmt.Sprintf("k%d", i*7%11) })
	time.Sleep(1500 * time.Millisecond)
	a.Close() // its partitions are handed over
	for _, s := range []string{"w", "wr", "wa"} {
		waitOwned(t, "b to own every partition of "+s, func() bool { return owned(b, s) == 4 })
	}
	time.Sleep(1000 * time.Millisecond)
	a = start(t.TempDir()) // back, on an empty disk: restores from the changelog
	defer func() { a.Close() }()
	for _, s := range []string{"w", "wr", "wa"} {
		waitOwned(t, "a to take partitions of "+s+" back", func() bool {
			na, nb := owned(a, s), owned(b, s)
			return na > 0 && nb > 0 && na+nb == 4
		})
	}
	time.Sleep(1000 * time.Millisecond)
	want := in.stop(ctx, t, 4)
	for _, srv := range []*Server{a, b} {
		c := connect(ctx, t, srv)
		execAll(ctx, t, c, "FLUSH")
		c.Close(ctx)
	}
	if m := a.metrics.RestoredRecords.WithLabelValues("w"); testutil.ToFloat64(m) == 0 {
		t.Error("a restored nothing of w from the changelog, though it came back on an empty disk")
	}
	for _, out := range []string{"w", "wr", "wa"} {
		checkSecondPanes(ctx, t, addr, out, want, out == "wa")
	}
}

// TestIdlePartitionFollowsPeersOnOtherNodes: a stream's two partitions run
// on two servers. One partition's window [00:00, 00:01) holds a row and
// then nothing more arrives there; the other partition moves on to 00:02.
// The idle partition's window closes all the same, as on one server: its
// peer's watermark reaches it through the watermarks topic. Without that,
// each server's partitions would only see their own peers, and the pane
// would never be written.
func TestIdlePartitionFollowsPeersOnOtherNodes(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	addr, start := appNodes(t, 2, "peers")
	a := start(t.TempDir())
	defer func() { a.Close() }()
	ca := connect(ctx, t, a)
	defer ca.Close(ctx)
	execAll(ctx, t, ca,
		`CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 2, partition_key = 'k', idle_timeout = '1s')`,
		`CREATE STREAM w AS SELECT k, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`)
	b := start(t.TempDir())
	defer func() { b.Close() }()
	waitOwned(t, "one partition on each server", func() bool { return owned(a, "w") == 1 && owned(b, "w") == 1 })
	prod, err := kgo.NewClient(kgo.SeedBrokers(addr...), kgo.DefaultProduceTopic("ev"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for _, r := range []*kgo.Record{
		{Partition: 0, Key: []byte("alice"), Value: []byte(`{"k":"alice","ts":"2026-01-01T00:00:01Z"}`)},
		{Partition: 1, Key: []byte("dave"), Value: []byte(`{"k":"dave","ts":"2026-01-01T00:00:02Z"}`)},
		{Partition: 1, Key: []byte("dave"), Value: []byte(`{"k":"dave","ts":"2026-01-01T00:02:00Z"}`)},
	} {
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cb := connect(ctx, t, b)
	defer cb.Close(ctx)
	deadline := time.Now().Add(20 * time.Second)
	for {
		execAll(ctx, t, cb, "FLUSH")
		execAll(ctx, t, ca, "FLUSH")
		got := map[string]bool{}
		for _, v := range readOutput(ctx, t, addr, "w", false) {
			got[v] = true
		}
		if got[`{"k":"alice","ws":"2026-01-01T00:00:00Z","n":1}`] && got[`{"k":"dave","ws":"2026-01-01T00:00:00Z","n":1}`] {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("panes %v: the idle partition's window [00:00, 00:01) never closed", got)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// TestChangelogWrittenWholeFromOlderState: a data dir whose state the
// changelog does not hold (written before changelogs existed; here the
// changelog topics are deleted while the server is down) is written to
// the changelog whole by its first commit. A second server on an empty
// disk then takes the stream over from that changelog alone: an open
// window's rows counted before and after add up.
func TestChangelogWrittenWholeFromOlderState(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	addr, start := appNodes(t, 2, "older")
	dirA := t.TempDir()
	a := start(dirA)
	ca := connect(ctx, t, a)
	execAll(ctx, t, ca,
		`CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 2, partition_key = 'k')`,
		`CREATE STREAM w AS SELECT k, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`,
		`INSERT INTO ev VALUES ('a', TIMESTAMP '2026-01-01 00:00:01'), ('b', TIMESTAMP '2026-01-01 00:00:02'), ('a', TIMESTAMP '2026-01-01 00:00:03')`,
		`FLUSH`)
	ca.Close(ctx)
	a.Close()
	// The state on a's disk is all there is of it now.
	adm := kadmClient(t, addr)
	if _, err := adm.DeleteTopics(ctx, "turbine-older-w-changelog"); err != nil {
		t.Fatal(err)
	}
	waitOwned(t, "the changelog topic to go", func() bool {
		td, err := adm.ListTopics(ctx, "turbine-older-w-changelog")
		return err == nil && !td.Has("turbine-older-w-changelog")
	})
	a = start(dirA) // its first commit writes the whole state to the new changelog
	ca = connect(ctx, t, a)
	execAll(ctx, t, ca, `INSERT INTO ev VALUES ('b', TIMESTAMP '2026-01-01 00:00:04')`, `FLUSH`)
	ca.Close(ctx)
	a.Close()
	b := start(t.TempDir()) // an empty disk: everything comes from the changelog
	defer b.Close()
	cb := connect(ctx, t, b)
	defer cb.Close(ctx)
	execAll(ctx, t, cb, `INSERT INTO ev VALUES ('a', TIMESTAMP '2026-01-01 00:00:05'), ('a', TIMESTAMP '2026-01-01 00:05:00'), ('b', TIMESTAMP '2026-01-01 00:05:00')`, `FLUSH`)
	got := map[string]bool{}
	for _, v := range readOutput(ctx, t, addr, "w", false) {
		got[v] = true
	}
	for _, want := range []string{`{"k":"a","ws":"2026-01-01T00:00:00Z","n":3}`, `{"k":"b","ws":"2026-01-01T00:00:00Z","n":2}`} {
		if !got[want] {
			t.Errorf("panes %v: want %s (rows before the changelog existed, and after)", got, want)
		}
	}
	if testutil.ToFloat64(b.metrics.RestoredRecords.WithLabelValues("w")) == 0 {
		t.Error("b restored nothing from the changelog")
	}
}

func kadmClient(t *testing.T, addr []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr...), kgo.MetadataMinAge(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}
