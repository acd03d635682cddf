package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/turbinesql/turbinesql/console"
)

// TestConsoleAPI checks the console's JSON against a running server, with
// no browser (make test-console draws it in Chromium): a keyless combine
// is named by what it combines, lags are whole numbers, a stream's page
// carries its SQL, its plan and a history of real samples, the Sources
// page holds a source's columns, partitions and records, and the
// Partitions page names this process as the cluster does and counts what
// the repartition hop read.
func TestConsoleAPI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := startTestServer(t, t.TempDir(), func(c *Config) { c.consoleSampleEvery = 100 * time.Millisecond })
	defer srv.Close()
	conn := connect(ctx, t, srv)
	defer conn.Close(ctx)
	for _, q := range []string{
		`CREATE SOURCE clicks (tenant TEXT, user_id TEXT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'clicks', partitions = 4, partition_key = 'tenant')`,
		`CREATE STREAM per_user WITH (strategy = 'repartition') AS SELECT user_id, COUNT(*) AS n FROM clicks GROUP BY user_id, TUMBLE(ts, INTERVAL '10' SECOND)`,
		`CREATE STREAM total_cmb WITH (strategy = 'combine', processing_guarantee = 'exactly_once') AS SELECT COUNT(*) AS n, MAX(amount) AS top FROM clicks GROUP BY TUMBLE(ts, INTERVAL '10' SECOND)`,
		`INSERT INTO clicks VALUES ('t0', 'a', 1, TIMESTAMP '2026-01-01 00:00:01'), ('t1', 'b', 2, TIMESTAMP '2026-01-01 00:00:12'), ('t2', NULL, 3, TIMESTAMP '2026-01-01 00:00:25')`,
		`FLUSH`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	get := func(path string, v any) {
		t.Helper()
		resp, err := http.Get("http://" + srv.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", path, resp.Status)
		}
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}

	// The keyless combine: named by its aggregates and the window, with
	// its merge's watermark lag (wall clock minus 2026: many seconds) a
	// whole number; its page has its SQL, its guarantee and its plan.
	var top console.Topology
	waitFor(t, 20*time.Second, "total_cmb's history to hold three samples", func() bool {
		get("/api/topology?stream=total_cmb", &top)
		return len(top.History) >= 3
	})
	var combine *console.Node
	for i, n := range top.Nodes {
		if n.Kind == console.KindCombine {
			combine = &top.Nodes[i]
		}
	}
	if combine == nil {
		t.Fatalf("total_cmb has no combine node: %+v", top.Nodes)
	}
	if combine.Title != "combine count(1), max(amount) per window (no group key)" {
		t.Errorf("keyless combine node %q", combine.Title)
	}
	for _, st := range combine.Stats {
		if strings.Contains(st.Name, "lag") {
			if _, err := strconv.ParseInt(st.Value, 10, 64); err != nil {
				t.Errorf("combine %s = %q, not a whole number", st.Name, st.Value)
			}
		}
	}
	if !strings.HasPrefix(top.SQL, "CREATE STREAM total_cmb") || top.Guarantee != "exactly_once" || top.Strategy != "combine" ||
		!strings.HasPrefix(top.Reason, "rule ") || len(top.Plan) == 0 || !strings.HasPrefix(top.Plan[0], "Strategy: combine (rule ") {
		t.Errorf("total_cmb's page: SQL %q, guarantee %q, strategy %q (%s), plan %q", top.SQL, top.Guarantee, top.Strategy, top.Reason, top.Plan)
	}
	// (Its lag is not checked: under exactly_once a task's lag counts the
	// transaction markers after its last record, which it never reads.)
	if last := top.History[len(top.History)-1]; last.LateRows != 0 || last.DeadLettered != 0 || last.InPerSec == nil {
		t.Errorf("total_cmb's last sample after FLUSH: %+v", last)
	}

	// The history follows the counters: more rows in show as a rate.
	if _, err := conn.Exec(ctx, `INSERT INTO clicks VALUES ('t3', 'c', 4, TIMESTAMP '2026-01-01 00:00:31'), ('t3', 'c', 5, TIMESTAMP '2026-01-01 00:00:32')`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `FLUSH`); err != nil {
		t.Fatal(err)
	}
	var rep console.Topology
	waitFor(t, 10*time.Second, "per_user's history to show the rows that came in", func() bool {
		get("/api/topology?stream=per_user", &rep)
		for _, pt := range rep.History {
			if pt.InPerSec != nil && *pt.InPerSec > 0 {
				return true
			}
		}
		return false
	})
	// Caught up: no lag, the NULL key's row late in no window.
	waitFor(t, 5*time.Second, "per_user's history to sample it caught up", func() bool {
		get("/api/topology?stream=per_user", &rep)
		last := rep.History[len(rep.History)-1]
		return last.Lag == 0 && last.LateRows == 0
	})

	// Sources: columns as DESCRIBE shows them, the partitions and the
	// records they hold, the streams reading it.
	var sources []console.SourceInfo
	get("/api/sources", &sources)
	if len(sources) != 1 {
		t.Fatalf("sources %+v", sources)
	}
	src := sources[0]
	var cols []string
	for _, c := range src.Columns {
		cols = append(cols, c.Name+" "+c.Type)
	}
	total := int64(0)
	for _, p := range src.Partitions {
		total += p.Records
	}
	if strings.Join(cols, ", ") != "tenant TEXT, user_id TEXT, amount BIGINT, ts TIMESTAMP" || len(src.Partitions) != 4 || total != 5 || src.Records != 5 ||
		strings.Join(src.Streams, ",") != "per_user,total_cmb" || src.PartitionKey != "tenant" || src.Error != "" {
		t.Errorf("source clicks: %+v", src)
	}

	// Partitions: this process by its node id, and the hop's reads.
	var members []console.Member
	waitFor(t, 10*time.Second, "this process's heartbeat", func() bool {
		get("/api/cluster", &members)
		return len(members) > 0
	})
	var parts []console.Partition
	get("/api/partitions", &parts)
	hopIn := int64(0)
	for _, p := range parts {
		if p.Node != srv.nodeID {
			t.Fatalf("a partition names node %q; the cluster calls this process %q", p.Node, srv.nodeID)
		}
		if p.Stage == "repartition hop" {
			hopIn += p.RecordsIn
		}
	}
	if hopIn != 5 {
		t.Errorf("the repartition hop read %d records over its partitions, want the 5 inserted", hopIn)
	}
	if len(members) != 1 || members[0].Node != srv.nodeID {
		t.Errorf("cluster %+v, want this process as %s", members, srv.nodeID)
	}

	// Streams: lags are whole numbers of records (the JSON's type), the
	// rows name their strategy.
	var streams []console.Stream
	get("/api/streams", &streams)
	if len(streams) != 2 || streams[0].Strategy != "repartition" || streams[1].Strategy != "combine" || streams[0].RecordsIn != 5 {
		t.Errorf("streams %+v", streams)
	}
}
