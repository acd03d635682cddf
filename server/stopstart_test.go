package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestStopHoldsOnEveryNode: ALTER STREAM w STOP on one node stops w on
// every node of the app, and returns once no node is a member of its
// consumer group; a node restarting meanwhile keeps it stopped; while a
// member runs a release that does not follow STOP, STOP is refused;
// START on another node runs it everywhere again, and its panes count the
// rows from before the STOP and from while it was stopped, once each.
func TestStopHoldsOnEveryNode(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	addr, start := appNodes(t, 2, "stops", func(c *Config) { c.SessionTimeout = 6 * time.Second })
	a := start(t.TempDir())
	defer func() { a.Close() }()
	dirB := t.TempDir()
	b := start(dirB)
	defer func() { b.Close() }()
	ca := connectNotices(ctx, t, a)
	defer ca.Close(ctx)
	execAll(ctx, t, ca.Conn,
		`CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 2, partition_key = 'k')`,
		`CREATE STREAM w AS SELECT k, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`,
		`CREATE STREAM other AS SELECT k FROM ev`)
	waitOwned(t, "both nodes to run w", func() bool { return ownsTasks(a, "w") && ownsTasks(b, "w") })
	produceRows := func(ts string, keys ...string) {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr...), kgo.DefaultProduceTopic("ev"))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		for _, k := range keys {
			if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(k), Value: []byte(fmt.Sprintf(`{"k":%q,"ts":%q}`, k, ts))}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produceRows("2026-01-01T00:00:10Z", "a", "b", "c", "d")
	execAll(ctx, t, ca.Conn, "FLUSH")

	execAll(ctx, t, ca.Conn, "ALTER STREAM w STOP")
	if ns := ca.takeNotices(); len(ns) > 0 {
		t.Fatalf("STOP raised %s: %s", ns[0].Severity, ns[0].Message)
	}
	members, err := a.kafka.GroupAssignment(ctx, a.groupName("w"), "ev")
	if err != nil {
		t.Fatal(err)
	}
	if len(members.Members) > 0 {
		t.Fatalf("STOP returned while %v are members of w's group", members.Members)
	}
	for _, srv := range []*Server{a, b} {
		if got := statusOn(ctx, t, srv, "w"); got != "stopped" {
			t.Fatalf("w on %s: %q, want stopped", srv.nodeID, got)
		}
		if got := statusOn(ctx, t, srv, "other"); got != "running" {
			t.Fatalf("other on %s: %q, want running", srv.nodeID, got)
		}
	}
	// Rows while stopped; FLUSH covers the running streams only.
	produceRows("2026-01-01T00:00:20Z", "a", "b", "c", "d")
	execAll(ctx, t, ca.Conn, "FLUSH")

	b.Close()
	b = start(dirB)
	if got := statusOn(ctx, t, b, "w"); got != "stopped" {
		t.Fatalf("w after b restarted: %q, want stopped", got)
	}
	if ownsTasks(b, "w") {
		t.Fatal("b runs w's tasks after its restart")
	}

	// A member of the previous release would go on running a stopped
	// stream: STOP is refused while one is in the app.
	members2 := controlLog{k: a.kafka, topic: a.controlTopic()}
	if err := members2.Put(ctx, "member/old", []byte(`{"v":1,"node":"old","pg_addr":"x","tasks_owned":0,"tasks_standby":0,"state":"up","hop_seals":true}`)); err != nil {
		t.Fatal(err)
	}
	waitOwned(t, "the old member to be seen", func() bool { return len(a.members.Load().Members()) == 3 })
	_, err = ca.Exec(ctx, "ALTER STREAM other STOP")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "55000" || !strings.Contains(pe.Message, "old") {
		t.Fatalf("STOP with an old member: %v; want 55000 naming it", err)
	}
	if err := members2.Put(ctx, "member/old", nil); err != nil {
		t.Fatal(err)
	}
	waitOwned(t, "the old member to leave", func() bool { return len(a.members.Load().Members()) == 2 })

	cb := connect(ctx, t, b)
	defer cb.Close(ctx)
	execAll(ctx, t, cb, "ALTER STREAM w START")
	waitOwned(t, "both nodes to run w again", func() bool { return ownsTasks(a, "w") && ownsTasks(b, "w") })
	produceRows("2026-01-01T00:00:30Z", "a", "b")
	produceRows("2026-01-01T00:05:00Z", "a", "b", "c", "d", "e", "f") // closes the first minute on both partitions
	execAll(ctx, t, cb, "FLUSH")
	got := map[string]int64{}
	rows, err := cb.Query(ctx, "SELECT k, n FROM w WHERE ws = TIMESTAMP '2026-01-01 00:00:00'")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		if _, dup := got[k]; dup {
			t.Errorf("pane of %s written twice", k)
		}
		got[k] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"a": 3, "b": 3, "c": 2, "d": 2}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("first minute's panes %v, want %v", got, want)
	}
}

// statusOn is SHOW STREAMS's status of a stream on srv.
func statusOn(ctx context.Context, t *testing.T, srv *Server, name string) string {
	t.Helper()
	conn := connect(ctx, t, srv)
	defer conn.Close(ctx)
	status, _ := streamStatus(ctx, t, conn, name)
	return status
}

// ownsTasks says whether srv runs tasks of stream name's last stage.
func ownsTasks(srv *Server, name string) bool {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	r, ok := srv.streams[name]
	return ok && r.final != nil && len(r.final.Owned()) > 0
}
