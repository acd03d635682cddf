package server

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/sql"
)

// waitWithin polls cond every 10 ms for up to limit and returns how long it
// took; it fails the test when cond never holds.
func waitWithin(t *testing.T, what string, limit time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

func running(srv *Server, stream string) bool {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	r, ok := srv.streams[stream]
	return ok && r.final != nil
}

func hasSource(srv *Server, name string) bool { _, ok := srv.cat.Source(name); return ok }
func hasStream(srv *Server, name string) bool { _, ok := srv.cat.Stream(name); return ok }

// TestDDLFollowedAcrossNodes: DDL run on one node takes effect on the
// other within a second, without a restart: CREATE SOURCE and CREATE
// STREAM on b start the stream on a too (its partitions split between
// them through the stream's group), a bounded SELECT on a reads the
// panes both computed, and DROP STREAM / DROP SOURCE on a stop and remove
// them on b.
func TestDDLFollowedAcrossNodes(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, start := appNodes(t, 2, "follow")
	a := start(t.TempDir())
	defer func() { a.Close() }()
	b := start(t.TempDir())
	defer func() { b.Close() }()
	ca, cb := connect(ctx, t, a), connect(ctx, t, b)
	defer ca.Close(ctx)
	defer cb.Close(ctx)

	// Times are from the statement's start: it returns once its record
	// came back through the log, when the other node reads it too.
	t0 := time.Now()
	execAll(ctx, t, cb, `CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 2, partition_key = 'k')`)
	waitWithin(t, "a to know the source b created", time.Second, func() bool { return hasSource(a, "ev") })
	t.Logf("CREATE SOURCE on b seen on a after %v", time.Since(t0))
	t0 = time.Now()
	execAll(ctx, t, cb, `CREATE STREAM w AS SELECT k, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`)
	waitWithin(t, "a to run the stream b created", time.Second, func() bool { return running(a, "w") })
	t.Logf("CREATE STREAM on b running on a after %v", time.Since(t0))
	waitOwned(t, "one partition of w on each node", func() bool { return owned(a, "w") == 1 && owned(b, "w") == 1 })

	execAll(ctx, t, ca,
		`INSERT INTO ev VALUES ('a', TIMESTAMP '2026-01-01 00:00:01'), ('b', TIMESTAMP '2026-01-01 00:00:02'), ('a', TIMESTAMP '2026-01-01 00:00:03'),
			('c', TIMESTAMP '2026-01-01 00:00:04'), ('a', TIMESTAMP '2026-01-01 00:05:00'), ('b', TIMESTAMP '2026-01-01 00:05:00'), ('c', TIMESTAMP '2026-01-01 00:05:00')`)
	execAll(ctx, t, ca, "FLUSH")
	execAll(ctx, t, cb, "FLUSH")
	got := map[string]int64{}
	rows, err := ca.Query(ctx, `SELECT k, n FROM w WHERE ws = TIMESTAMP '2026-01-01 00:00:00'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		got[k] += n
	}
	rows.Close()
	if got["a"] != 2 || got["b"] != 1 || got["c"] != 1 || len(got) != 3 {
		t.Errorf("panes of [00:00, 00:01) read on a: %v, want a=2 b=1 c=1 once each", got)
	}

	t0 = time.Now()
	execAll(ctx, t, ca, `DROP STREAM w`)
	waitWithin(t, "b to stop the stream a dropped", time.Second, func() bool { return !running(b, "w") && !hasStream(b, "w") })
	t.Logf("DROP STREAM on a stopped on b after %v", time.Since(t0))
	execAll(ctx, t, ca, `DROP SOURCE ev`)
	waitWithin(t, "b to drop the source a dropped", time.Second, func() bool { return !hasSource(b, "ev") })
	// Users follow too.
	execAll(ctx, t, ca, `CREATE USER alice WITH PASSWORD 'secret' ADMIN`)
	waitWithin(t, "b to know the user a created", time.Second, func() bool { u, ok := b.cat.User("alice"); return ok && u.Admin })
	execAll(ctx, t, cb, `DROP USER alice`)
	waitWithin(t, "a to drop the user b dropped", time.Second, func() bool { _, ok := a.cat.User("alice"); return !ok })
	// A statement on b after one on a has returned sees it: b is caught
	// up with the log before it runs DDL.
	if _, err := cb.Exec(ctx, `DROP SOURCE ev`); sqlstate(err) != "42P01" {
		t.Errorf("DROP SOURCE ev on b after a dropped it: %v, want 42P01", err)
	}
}

func sqlstate(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// raceOn holds the next catalog write of srv until release is closed,
// after telling held: its statement has checked the catalog it knows and
// is about to write, which is when another node's statement can slip in.
func raceOn(srv *Server) (held chan struct{}, release chan struct{}) {
	held, release = make(chan struct{}), make(chan struct{})
	first := true
	srv.clog.beforeWrite = func(catalog.Change) {
		if first {
			first = false
			close(held)
			<-release
		}
	}
	return held, release
}

// raced runs stmt on conn (whose node raceOn holds) while winner runs on
// the other node, and returns the held statement's error.
func raced(ctx context.Context, t *testing.T, held, release chan struct{}, loser *pgx.Conn, stmt string, win func()) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := loser.Exec(ctx, stmt)
		done <- err
	}()
	<-held
	win()
	close(release)
	return <-done
}

// catalogOf is a node's catalog as text, to compare nodes.
func catalogOf(srv *Server) string {
	var out []string
	for _, s := range srv.cat.Sources() {
		out = append(out, "source "+s.SQL)
	}
	for _, s := range srv.cat.Streams() {
		out = append(out, "stream "+s.SQL)
	}
	for _, f := range srv.failedObjects() {
		out = append(out, "failed "+f.kind+"/"+f.name)
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// TestCatalogRaceOneWinner: statements on two nodes that each pass
// against the catalog their node knows, but contradict each other, are
// decided by the catalog log's order. The second record to land loses:
// its statement fails with the SQLSTATE of what it lost to, the node that
// ran it undoes it, and both nodes agree, also after both restart from
// the log (whose last record per key, all compaction keeps, is the
// winner's). Three races: two CREATE SOURCEs of one name; a DROP SOURCE
// that lands before a CREATE STREAM reading it; and one that lands after.
func TestCatalogRaceOneWinner(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, start := appNodes(t, 2, "race")
	dirA, dirB := t.TempDir(), t.TempDir()
	a, b := start(dirA), start(dirB)
	defer func() { a.Close() }()
	defer func() { b.Close() }()
	ca, cb := connect(ctx, t, a), connect(ctx, t, b)

	// 1. CREATE SOURCE x on both, different definitions: a's lands first.
	held, release := raceOn(b)
	err := raced(ctx, t, held, release, cb, `CREATE SOURCE x (v BIGINT) WITH (topic = 'x_b')`, func() {
		execAll(ctx, t, ca, `CREATE SOURCE x (v TEXT) WITH (topic = 'x_a')`)
	})
	if sqlstate(err) != "42P07" || !strings.Contains(err.Error(), "concurrent") {
		t.Errorf("losing CREATE SOURCE: %v, want 42P07 saying a concurrent statement won", err)
	}
	for _, srv := range []*Server{a, b} {
		waitWithin(t, "x to be a's on "+srv.nodeID, 2*time.Second, func() bool { src, ok := srv.cat.Source("x"); return ok && src.Topic == "x_a" })
	}

	// 2. DROP SOURCE src on a lands before CREATE STREAM t reading it on b.
	execAll(ctx, t, ca, `CREATE SOURCE src (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 2)`)
	waitWithin(t, "b to know src", 2*time.Second, func() bool { return hasSource(b, "src") })
	held, release = raceOn(b)
	err = raced(ctx, t, held, release, cb, `CREATE STREAM t AS SELECT k, COUNT(*) AS n FROM src GROUP BY k`, func() {
		execAll(ctx, t, ca, `DROP SOURCE src`)
	})
	if sqlstate(err) != "42P01" || !strings.Contains(err.Error(), "src") {
		t.Errorf("CREATE STREAM over a source dropped first: %v, want 42P01 naming src", err)
	}
	for _, srv := range []*Server{a, b} {
		waitWithin(t, "t and src gone on "+srv.nodeID, 2*time.Second, func() bool {
			return !hasSource(srv, "src") && !hasStream(srv, "t") && !running(srv, "t")
		})
	}

	// 3. CREATE STREAM t2 reading src2 on b lands before DROP SOURCE src2 on a.
	execAll(ctx, t, ca, `CREATE SOURCE src2 (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 2)`)
	waitWithin(t, "b to know src2", 2*time.Second, func() bool { return hasSource(b, "src2") })
	held, release = raceOn(a)
	err = raced(ctx, t, held, release, ca, `DROP SOURCE src2`, func() {
		execAll(ctx, t, cb, `CREATE STREAM t2 AS SELECT k, COUNT(*) AS n FROM src2 GROUP BY k`)
	})
	if sqlstate(err) != "2BP01" || !strings.Contains(err.Error(), "t2") {
		t.Errorf("DROP SOURCE under a stream created first: %v, want 2BP01 naming t2", err)
	}
	for _, srv := range []*Server{a, b} {
		waitWithin(t, "src2 and t2 running on "+srv.nodeID, 3*time.Second, func() bool {
			return hasSource(srv, "src2") && running(srv, "t2")
		})
	}
	want := catalogOf(a)
	if got := catalogOf(b); got != want {
		t.Fatalf("nodes disagree:\na:\n%s\nb:\n%s", want, got)
	}
	for _, s := range []string{"CREATE SOURCE x ", "x_a", "CREATE SOURCE src2 ", "CREATE STREAM t2 "} {
		if !strings.Contains(want, s) {
			t.Errorf("catalog lacks %q:\n%s", s, want)
		}
	}
	if strings.Contains(want, "x_b") || strings.Contains(want, "SOURCE src ") || strings.Contains(want, "STREAM t AS") {
		t.Errorf("a loser stands:\n%s", want)
	}

	// What compaction keeps: the last record of each key is the winner's.
	entries, _, err := a.clog.load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]string{}
	for _, e := range entries {
		last[e.kind+"/"+e.name] = e.sql
	}
	if !strings.Contains(last["source/x"], "x_a") || last["stream/t"] != "" || last["source/src"] != "" || last["source/src2"] == "" || last["stream/t2"] == "" {
		t.Errorf("last record per key: %v", last)
	}

	ca.Close(ctx)
	cb.Close(ctx)
	a.Close()
	b.Close()
	a, b = start(dirA), start(dirB)
	if ga, gb := catalogOf(a), catalogOf(b); ga != want || gb != want {
		t.Errorf("after a restart:\na:\n%s\nb:\n%s\nwant:\n%s", ga, gb, want)
	}
}

// TestCatalogFollowsVersion1Records: a record as nodes of the previous
// release write it (the statement, no headers) is applied live like any
// other, so a cluster upgraded one node at a time keeps following the
// DDL of its older nodes.
func TestCatalogFollowsVersion1Records(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr, start := appNodes(t, 1, "v1")
	a := start(t.TempDir())
	defer a.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	put := func(key, val string) {
		r := &kgo.Record{Topic: "turbine-v1-catalog", Key: []byte(key)}
		if val != "" {
			r.Value = []byte(val)
		}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	put("source/old", `CREATE SOURCE old (k TEXT) WITH (topic = 'ev')`)
	waitWithin(t, "a to apply a version-1 CREATE SOURCE", time.Second, func() bool { return hasSource(a, "old") })
	put("source/old", "")
	waitWithin(t, "a to apply a version-1 tombstone", time.Second, func() bool { return !hasSource(a, "old") })
}

// TestCatalogRefusesNewerVersionRecords: a record of a catalog version
// newer than this release reads (what a node of a later release writes
// when a change of meaning bumps turbine.catalog.v) is not applied, live
// or at start: the object it names stays as this node had it while
// following, and after a restart it is marked failed with an error naming
// the version. A record of the same version, next to it, is applied.
func TestCatalogRefusesNewerVersionRecords(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	addr, start := appNodes(t, 1, "vnext")
	dir := t.TempDir()
	a := start(dir)
	defer func() { a.Close() }()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	put := func(key, val, version string) {
		r := &kgo.Record{Topic: "turbine-vnext-catalog", Key: []byte(key), Value: []byte(val), Headers: []kgo.RecordHeader{
			{Key: hdrCatalogV, Value: []byte(version)}, {Key: hdrNode, Value: []byte("nodeNext")},
			{Key: hdrStmt, Value: []byte(newStmtID())}, {Key: hdrOp, Value: []byte("create")},
		}}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	put("source/later", `CREATE SOURCE later (k TEXT) WITH (topic = 'ev')`, "3")
	put("source/now", `CREATE SOURCE now (k TEXT) WITH (topic = 'ev')`, strconv.Itoa(catalogVersion))
	waitWithin(t, "a to apply the version-2 record", 5*time.Second, func() bool { return hasSource(a, "now") })
	if hasSource(a, "later") {
		t.Fatal("a applied a record of catalog version 3")
	}
	a.Close()
	a = start(dir)
	if !hasSource(a, "now") || hasSource(a, "later") {
		t.Fatalf("after a restart: catalog\n%s", catalogOf(a))
	}
	var failed []string
	for _, f := range a.failedObjects() {
		failed = append(failed, f.kind+"/"+f.name+": "+f.err)
	}
	if len(failed) != 1 || !strings.HasPrefix(failed[0], "source/later: ") || !strings.Contains(failed[0], `newer release (turbine.catalog.v "3"`) {
		t.Fatalf("failed objects after a restart: %q, want source/later refused as of a newer release", failed)
	}
}

// TestCreateDoesNotWipeARunningStream: a CREATE STREAM deletes what an
// earlier stream of its name left (its groups and changelogs) before
// writing its record. When a node that has not yet read another node's
// CREATE of that name does so, the groups have members: it must fail with
// 55006 and delete nothing, and the running stream keeps its groups.
func TestCreateDoesNotWipeARunningStream(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, start := appNodes(t, 2, "wipe")
	a, b := start(t.TempDir()), start(t.TempDir())
	defer a.Close()
	defer b.Close()
	ca := connect(ctx, t, a)
	defer ca.Close(ctx)
	execAll(ctx, t, ca,
		`CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 2, partition_key = 'k')`,
		`CREATE STREAM w AS SELECT k, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`)
	waitOwned(t, "one partition of w on each node", func() bool { return owned(a, "w") == 1 && owned(b, "w") == 1 })
	b.mu.Lock()
	plan := b.streams["w"].plan
	b.mu.Unlock()
	// What b's CREATE STREAM w would do before writing, had it not read a's.
	err := b.dropOldGroups(ctx, "w", plan)
	var se *sql.Error
	if !errors.As(err, &se) || se.Code != "55006" {
		t.Fatalf("wiping a running stream's groups: %v, want 55006", err)
	}
	if !running(a, "w") || !running(b, "w") || owned(a, "w")+owned(b, "w") != 2 {
		t.Errorf("w disturbed: a owns %d, b owns %d", owned(a, "w"), owned(b, "w"))
	}
	adm := kadmClient(t, a.KafkaAddrs())
	td, err := adm.ListTopics(ctx, changelogTopic(a.groupName("w")))
	if err != nil || !td.Has(changelogTopic(a.groupName("w"))) {
		t.Errorf("w's changelog is gone (%v)", err)
	}
}
