package server

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
)

type clusterRow struct {
	node, pg, state string
	http            *string
	owned, standby  int64
}

func showCluster(ctx context.Context, t *testing.T, c *pgx.Conn) map[string]clusterRow {
	t.Helper()
	rows, err := c.Query(ctx, "SHOW CLUSTER")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]clusterRow{}
	for rows.Next() {
		var r clusterRow
		if err := rows.Scan(&r.node, &r.pg, &r.http, &r.owned, &r.standby, &r.state); err != nil {
			t.Fatal(err)
		}
		out[r.node] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestShowCluster: SHOW CLUSTER on either node lists both, each with its
// pgwire and HTTP address, the tasks it owns (a stream's two partitions
// split between them) and its state. A node that stops heartbeating, as a
// killed one does, is gone from the list once the session timeout has
// passed; a node that stops cleanly is gone at once.
func TestShowCluster(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A broker that allows a short session timeout, so the test need not
	// wait Kafka's 6 s minimum.
	broker, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "ev"), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	const timeout = 2 * time.Second
	start := func() *Server {
		return startTestServer(t, t.TempDir(), func(c *Config) {
			c.Brokers, c.AppID, c.CommitInterval, c.SessionTimeout = broker.ListenAddrs(), "members", 50*time.Millisecond, timeout
			c.HTTPAddr = "127.0.0.1:0"
		})
	}
	a, b := start(), start()
	defer func() { a.Close() }()
	defer func() { b.Close() }()
	ca := connect(ctx, t, a)
	defer ca.Close(ctx)
	execAll(ctx, t, ca,
		`CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 2, partition_key = 'k')`,
		`CREATE STREAM w AS SELECT k, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`)
	waitOwned(t, "one partition of w on each node", func() bool { return owned(a, "w") == 1 && owned(b, "w") == 1 })

	cb := connect(ctx, t, b)
	defer cb.Close(ctx)
	for _, c := range []*pgx.Conn{ca, cb} {
		waitWithin(t, "both nodes listed, up, with a task each", 3*time.Second, func() bool {
			got := showCluster(ctx, t, c)
			ra, rb := got[a.nodeID], got[b.nodeID]
			return len(got) == 2 && ra.state == "up" && rb.state == "up" && ra.owned == 1 && rb.owned == 1
		})
		got := showCluster(ctx, t, c)
		for _, srv := range []*Server{a, b} {
			r := got[srv.nodeID]
			if r.pg != srv.PGAddr() || r.http == nil || *r.http != srv.HTTPAddr() || r.standby != 0 {
				t.Errorf("row of %s: %+v, want pg %s http %s", srv.nodeID, r, srv.PGAddr(), srv.HTTPAddr())
			}
		}
	}

	// b goes silent as if killed: listed until the session timeout, then gone.
	b.stopHeartbeats()
	t0 := time.Now()
	waitWithin(t, "b gone from a's SHOW CLUSTER", timeout+2*time.Second, func() bool {
		_, there := showCluster(ctx, t, ca)[b.nodeID]
		return !there
	})
	if d := time.Since(t0); d < timeout-1500*time.Millisecond {
		t.Errorf("b dropped after %v, before the session timeout %v", d, timeout)
	}
	t.Logf("a silent node left SHOW CLUSTER %v after its heartbeats stopped (session timeout %v)", time.Since(t0), timeout)

	// A clean stop says so: gone well before the session timeout.
	c := start()
	waitWithin(t, "c listed", 3*time.Second, func() bool { _, there := showCluster(ctx, t, ca)[c.nodeID]; return there })
	c.Close()
	t0 = time.Now()
	waitWithin(t, "c gone at once after a clean stop", timeout/2, func() bool { _, there := showCluster(ctx, t, ca)[c.nodeID]; return !there })
	t.Logf("a cleanly stopped node left SHOW CLUSTER after %v", time.Since(t0))
}
