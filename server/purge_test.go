package server

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/streamplan"
)

const purgeStreamSQL = `CREATE STREAM %s WITH (processing_guarantee = 'exactly_once', strategy = '%s') AS
	SELECT k, TUMBLE_START(ts, INTERVAL '1' SECOND) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' SECOND)`

func purgeKey(i int) string { return fmt.Sprintf("k%d", i*7%11) }

// laterInput writes n rows of keys purgeKey from 01:00:01 on (after the
// end rows of a paneInput), then rows at 02:00:00 on each of parts
// partitions that close their windows, and adds their panes to want.
func laterInput(ctx context.Context, t *testing.T, addr []string, n, parts int, want map[string]int) {
	t.Helper()
	prod, err := kgo.NewClient(kgo.SeedBrokers(addr...), kgo.DefaultProduceTopic("ev"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	base := time.Date(2026, 1, 1, 1, 0, 1, 0, time.UTC)
	var recs []*kgo.Record
	for i := range n {
		k := purgeKey(i)
		ts := base.Add(time.Duration(i*20) * time.Millisecond)
		want[fmt.Sprintf("%s %s", k, ts.Truncate(time.Second).Format("15:04:05"))]++
		recs = append(recs, &kgo.Record{Key: []byte(k), Value: []byte(fmt.Sprintf(`{"k":%q,"ts":%q}`, k, ts.Format(time.RFC3339Nano)))})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	prod2, err := kgo.NewClient(kgo.SeedBrokers(addr...), kgo.DefaultProduceTopic("ev"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod2.Close()
	for p := range parts {
		r := &kgo.Record{Partition: int32(p), Key: []byte(fmt.Sprintf("end%d", p)), Value: []byte(`{"k":"end","ts":"2026-01-01T02:00:00Z"}`)}
		if err := prod2.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

func offsetsOf(ctx context.Context, t *testing.T, srv *Server, what, topic string) map[int32]int64 {
	t.Helper()
	var o map[int32]int64
	var err error
	if what == "start" {
		o, err = srv.kafka.StartOffsets(ctx, topic)
	} else if what == "end" {
		o, err = srv.kafka.EndOffsets(ctx, topic)
	} else {
		o, err = srv.kafka.GroupOffsets(ctx, what, topic)
	}
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func sealedOn(srv *Server, topic string) bool {
	srv.catMu.Lock()
	defer srv.catMu.Unlock()
	return isSealed(srv.cf.ledger, topic)
}

// TestHopPurgeFollowsSlowestReader: two exactly-once streams share a
// repartition hop, a third runs a combine. Nothing of the hop is purged
// while a member of the app runs a binary that does not know seals; then
// the purger seals the hop's generation, and only after its follower has
// read the seal does it delete, up to the slowest reader's committed
// offset: with one reader's consumer stopped, the records it has not read
// stay, and once it runs again its panes are exact. The combine topic is
// purged to its one reader's offset without a seal.
func TestHopPurgeFollowsSlowestReader(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	addr, start := appNodes(t, 2, "purge", func(c *Config) { c.PurgeInterval, c.PurgeSealRecords = -1, 1 })
	srv := start(t.TempDir())
	defer func() { srv.Close() }()
	conn := connect(ctx, t, srv)
	defer conn.Close(ctx)
	// idle_timeout above the test's length: only the end rows and FLUSH
	// move a partition's watermark, so the later input's rows are never
	// late, however long the steps in between take.
	execAll(ctx, t, conn,
		`CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 2, idle_timeout = INTERVAL '10' MINUTE)`,
		fmt.Sprintf(purgeStreamSQL, "r1", "repartition"),
		fmt.Sprintf(purgeStreamSQL, "r2", "repartition"),
		fmt.Sprintf(purgeStreamSQL, "c", "combine"))
	hop := streamplan.RepartitionTopic("purge", "ev", []string{"k"})
	cmb := combineTopic("purge", "ev", "c")
	in := startPaneInput(ctx, t, addr, 5, 30, purgeKey)
	time.Sleep(time.Second)
	want := in.stop(ctx, t, 2)
	execAll(ctx, t, conn, "FLUSH")

	p := srv.newPurger()
	// Fewer consumed records than the seal threshold: the hop is not
	// sealed; the combine topic needs no seal.
	srv.cfg.PurgeSealRecords = 1 << 40
	if got := p.Round(ctx); got[hop] != 0 || got[cmb] == 0 {
		t.Fatalf("round below the seal threshold purged %v; want the combine topic only", got)
	}
	if first := offsetsOf(ctx, t, srv, "start", cmb); !maps.Equal(first, offsetsOf(ctx, t, srv, srv.groupName("c"), cmb)) {
		t.Errorf("combine topic starts at %v, its reader committed %v", first, offsetsOf(ctx, t, srv, srv.groupName("c"), cmb))
	}
	time.Sleep(300 * time.Millisecond)
	if sealedOn(srv, hop) {
		t.Fatal("sealed below the threshold")
	}
	srv.cfg.PurgeSealRecords = 1
	// A member without hop_seals (the previous release): no seal, no
	// purge of the hop.
	members := controlLog{k: srv.kafka, topic: srv.controlTopic()}
	if err := members.Put(ctx, "member/old", []byte(`{"v":1,"node":"old","pg_addr":"x","tasks_owned":0,"tasks_standby":0,"state":"up"}`)); err != nil {
		t.Fatal(err)
	}
	waitOwned(t, "the old member to be seen", func() bool { return len(srv.members.Load().Members()) == 2 })
	if got := p.Round(ctx); got[hop] != 0 {
		t.Fatalf("round with an old member purged the hop: %v", got)
	}
	time.Sleep(300 * time.Millisecond)
	if sealedOn(srv, hop) {
		t.Fatal("sealed while a member does not know seals")
	}
	if err := members.Put(ctx, "member/old", nil); err != nil {
		t.Fatal(err)
	}
	waitOwned(t, "the old member to leave", func() bool { return len(srv.members.Load().Members()) == 1 })
	// This round seals; the hop is purged in a round after the follower
	// has read the seal.
	if got := p.Round(ctx); got[hop] != 0 {
		t.Fatalf("purged the hop in the round that sealed it: %v", got)
	}
	waitOwned(t, "the seal to come back through the catalog", func() bool { return sealedOn(srv, hop) })

	// r2's consumer stops; r1 reads everything of more input.
	srv.mu.Lock()
	srv.streams["r2"].final.Stop()
	srv.mu.Unlock()
	slow := offsetsOf(ctx, t, srv, srv.groupName("r2"), hop)
	laterInput(ctx, t, addr, 400, 2, want)
	waitOwned(t, "r1 to commit the whole hop", func() bool {
		end := offsetsOf(ctx, t, srv, "end", hop)
		r1 := offsetsOf(ctx, t, srv, srv.groupName("r1"), hop)
		for part, e := range end {
			if r1[part] < e {
				return false
			}
		}
		return true
	})
	if got := p.Round(ctx); got[hop] == 0 {
		t.Fatalf("sealed hop not purged: %v", got)
	}
	first := offsetsOf(ctx, t, srv, "start", hop)
	fast := offsetsOf(ctx, t, srv, srv.groupName("r1"), hop)
	if !maps.Equal(first, slow) {
		t.Fatalf("hop starts at %v; want the stopped reader's offsets %v (the other reader is at %v)", first, slow, fast)
	}
	ahead := false
	for part := range fast {
		ahead = ahead || fast[part] > slow[part]
	}
	if !ahead {
		t.Fatalf("r1 at %v is nowhere ahead of r2 at %v: the test shows nothing", fast, slow)
	}
	if n := testutil.ToFloat64(srv.purgedRecords.WithLabelValues(hop)); n == 0 {
		t.Error("turbine_hop_records_purged_total has nothing for the hop")
	}

	// r2 runs again and finds every record it had not read.
	if err := srv.restartStream(ctx, "r2"); err != nil {
		t.Fatal(err)
	}
	execAll(ctx, t, conn, "FLUSH")
	for _, out := range []string{"r1", "r2", "c"} {
		checkSecondPanes(ctx, t, addr, out, want, false)
	}
	p.Round(ctx)
	if first, end := offsetsOf(ctx, t, srv, "start", hop), offsetsOf(ctx, t, srv, "end", hop); !maps.Equal(first, end) {
		t.Errorf("after both readers committed everything the hop starts at %v, ends at %v", first, end)
	}
}

// TestStreamAfterPurgeReadsNextGeneration: two nodes purge on their own
// (every 200 ms). Once the hop behind r1 is sealed and purged, a stream
// created on the other node behind the same (topic, column) reads the
// hop's next generation, filled from the source's start, and its panes
// are exact over the whole history; a restart keeps each stream on its
// generation, and both stay exact with more input.
func TestStreamAfterPurgeReadsNextGeneration(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	addr, start := appNodes(t, 2, "gens", func(c *Config) { c.PurgeInterval, c.PurgeSealRecords = 200*time.Millisecond, 1 })
	dirA := t.TempDir()
	a := start(dirA)
	defer func() { a.Close() }()
	ca := connect(ctx, t, a)
	execAll(ctx, t, ca,
		`CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 2)`,
		fmt.Sprintf(purgeStreamSQL, "r1", "repartition"))
	b := start(t.TempDir())
	defer func() { b.Close() }()
	hop := streamplan.RepartitionTopic("gens", "ev", []string{"k"})
	in := startPaneInput(ctx, t, addr, 5, 30, purgeKey)
	time.Sleep(time.Second)
	want := in.stop(ctx, t, 2)
	execAll(ctx, t, ca, "FLUSH")
	waitOwned(t, "the hop to be sealed and purged", func() bool {
		if !sealedOn(a, hop) || !sealedOn(b, hop) {
			return false
		}
		for _, o := range offsetsOf(ctx, t, a, "start", hop) {
			if o > 0 {
				return true
			}
		}
		return false
	})
	ca.Close(ctx)

	cb := connect(ctx, t, b)
	g2 := streamplan.HopGeneration(hop, 2)
	rows, err := cb.Query(ctx, "EXPLAIN "+fmt.Sprintf(purgeStreamSQL, "r3", "repartition"))
	if err != nil {
		t.Fatal(err)
	}
	explained := false
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		explained = explained || strings.Contains(line, "internal topic "+g2+" ")
	}
	rows.Close()
	if !explained {
		t.Errorf("EXPLAIN does not name %s", g2)
	}
	execAll(ctx, t, cb, fmt.Sprintf(purgeStreamSQL, "r3", "repartition"))
	for _, srv := range []*Server{a, b} {
		waitOwned(t, "r3 on every node", func() bool { _, ok := srv.cat.Stream("r3"); return ok })
		if d, _ := srv.cat.Stream("r3"); d.Hop != g2 {
			t.Fatalf("r3 reads %q on %s, want %q", d.Hop, srv.nodeID, g2)
		}
	}
	execAll(ctx, t, cb, "FLUSH")
	checkSecondPanes(ctx, t, addr, "r3", want, false)
	checkSecondPanes(ctx, t, addr, "r1", want, false)
	cb.Close(ctx)

	// A restart re-derives each stream's generation from the catalog.
	a.Close()
	a = start(dirA)
	for name, topic := range map[string]string{"r1": hop, "r3": g2} {
		a.mu.Lock()
		r := a.streams[name]
		a.mu.Unlock()
		if r == nil || r.hop == nil || r.hop.topic != topic {
			t.Fatalf("after restart %s runs behind %+v, want %s", name, r, topic)
		}
	}
	laterInput(ctx, t, addr, 400, 2, want)
	ca = connect(ctx, t, a)
	defer ca.Close(ctx)
	execAll(ctx, t, ca, "FLUSH")
	checkSecondPanes(ctx, t, addr, "r1", want, false)
	checkSecondPanes(ctx, t, addr, "r3", want, false)
	if _, ok := catalogEntryHop(a, "r3"); !ok {
		t.Error("r3 is not in a's ledger after restart")
	}

	// The sealed generation's last stream goes: so do its topics; the
	// next generation, still read, stays.
	execAll(ctx, t, ca, "DROP STREAM r1")
	waitOwned(t, "the sealed generation's topics to be deleted", func() bool {
		n, err := a.kafka.Partitions(ctx, hop)
		m, err2 := a.kafka.Partitions(ctx, changelogTopic(hop))
		return err == nil && err2 == nil && n == 0 && m == 0
	})
	if n, err := a.kafka.Partitions(ctx, g2); err != nil || n != 2 {
		t.Fatalf("the generation r3 reads has %d partitions (%v)", n, err)
	}
}

func catalogEntryHop(srv *Server, name string) (string, bool) {
	srv.catMu.Lock()
	defer srv.catMu.Unlock()
	e, ok := srv.cf.ledger.Get(catalog.KindStream, name)
	return e.Hop, ok
}
