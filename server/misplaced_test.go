package server

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/console"
	"github.com/turbinesql/turbinesql/state"
)

// These tests feed a keyed source from two producers that place keys
// differently: INSERT (murmur2, as Kafka's Java client) and an outside
// franz-go client hashing keys with CRC32, as librdkafka (kcat,
// confluent-kafka) does by default. A key the two hashes put on different
// partitions is then on two partitions, and a local aggregation on it
// emits two panes with partial totals (issue 37, item 4).

// crc32Hasher places a key as librdkafka's default partitioner
// (consistent_random) does: CRC32 of the key modulo the count.
func crc32Hasher(key []byte, n int) int { return int(crc32.ChecksumIEEE(key) % uint32(n)) }

// crc32Producer writes records the way kcat does without -X
// partitioner=murmur2_random.
func crc32Producer(t *testing.T, brokers []string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(crc32Hasher)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

const misplacedSource = `CREATE SOURCE ev (user_id TEXT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 4, partition_key = 'user_id')`

// perUser is the query every plan runs here.
const perUser = `SELECT user_id, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n, SUM(amount) AS total FROM ev GROUP BY user_id, TUMBLE(ts, INTERVAL '1' MINUTE)`

// misplacedInput writes, for 40 users, two rows through the CRC32
// producer and one through INSERT, all in the window at 00:00, then one
// row at 00:05 on every partition to close it; it returns each user's
// true count and total of that window.
func misplacedInput(ctx context.Context, t *testing.T, brokers []string, conn *pgx.Conn) (count, total map[string]int64) {
	t.Helper()
	count, total = map[string]int64{}, map[string]int64{}
	cl := crc32Producer(t, brokers)
	var recs []*kgo.Record
	var inserts []string
	split := 0
	for i := 0; i < 40; i++ {
		u := fmt.Sprintf("user-%d", i)
		for j := 1; j <= 2; j++ {
			amount := int64(i*10 + j)
			recs = append(recs, &kgo.Record{Topic: "ev", Key: []byte(u),
				Value: []byte(fmt.Sprintf(`{"user_id":%q,"amount":%d,"ts":%d}`, u, amount, at(j)))})
			count[u]++
			total[u] += amount
		}
		inserts = append(inserts, fmt.Sprintf("('%s', %d, TIMESTAMP '2026-01-01 00:00:03')", u, 1000+i))
		count[u]++
		total[u] += int64(1000 + i)
		if crc32Hasher([]byte(u), 4) != int(state.PartitionFor([]byte(u), 4)) {
			split++
		}
	}
	if split == 0 {
		t.Fatal("no user is placed differently by CRC32 and murmur2: the test proves nothing")
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	execAll(ctx, t, conn, "INSERT INTO ev VALUES "+strings.Join(inserts, ", "))
	var closers []string
	for p := int32(0); p < 4; p++ {
		k := keyWhere("closer-", func(k []byte) bool { return state.PartitionFor(k, 4) == p })
		closers = append(closers, fmt.Sprintf("('%s', 0, TIMESTAMP '2026-01-01 00:05:00')", k))
	}
	execAll(ctx, t, conn, "INSERT INTO ev VALUES "+strings.Join(closers, ", "))
	return count, total
}

// userPanes reads a stream's panes of the window at 00:00: (n, total) per
// pane of each user.
func userPanes(ctx context.Context, t *testing.T, c *pgx.Conn, stream string) map[string][][2]int64 {
	t.Helper()
	rows, err := c.Query(ctx, "SELECT user_id, n, total FROM "+stream+" WHERE ws = TIMESTAMP '2026-01-01 00:00:00'")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][][2]int64{}
	for rows.Next() {
		var u string
		var n, total int64
		if err := rows.Scan(&u, &n, &total); err != nil {
			t.Fatal(err)
		}
		out[u] = append(out[u], [2]int64{n, total})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// exactPanes fails unless stream has one pane per user with its true
// count and total.
func exactPanes(ctx context.Context, t *testing.T, c *pgx.Conn, stream string, count, total map[string]int64) {
	t.Helper()
	got := userPanes(ctx, t, c, stream)
	for u, n := range count {
		if ps := got[u]; len(ps) != 1 || ps[0] != [2]int64{n, total[u]} {
			t.Fatalf("%s: panes of %s = %v, want one (%d, %d)", stream, u, ps, n, total[u])
		}
	}
	if len(got) != len(count) {
		t.Fatalf("%s: %d users, want %d", stream, len(got), len(count))
	}
}

// warningsFor are the WARNING notices among ns that name stream as
// degraded.
func warningsFor(ns []*pgconn.Notice, stream string) []*pgconn.Notice {
	var out []*pgconn.Notice
	for _, n := range ns {
		if n.Severity == "WARNING" && strings.Contains(n.Message, "stream "+stream+" is degraded") {
			out = append(out, n)
		}
	}
	return out
}

// consoleStream is the console's JSON of one stream.
func consoleStream(t *testing.T, r *placementRig, name string) console.Stream {
	t.Helper()
	resp, err := http.Get("http://" + r.srv.HTTPAddr() + "/api/streams")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var all []console.Stream
	if err := json.NewDecoder(resp.Body).Decode(&all); err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("stream %s not in /api/streams", name)
	return console.Stream{}
}

// TestMisplacedInputDegradesAndReplans, under both guarantees: a local
// aggregation over a key split by two hashes shows two panes for it with
// partial totals; SHOW STREAMS, the console, FLUSH and a SELECT of it say
// it is degraded and how to fix it, EXPLAIN and a new CREATE re-key such
// an input, and ALTER STREAM ... SET (strategy = 'repartition') computes
// it again, exactly, from the input's start. Streams whose plan does not
// rely on placement (repartition, combine, keyless, stateless) over the
// same topic are right and not degraded.
func TestMisplacedInputDegradesAndReplans(t *testing.T) {
	for _, guarantee := range []string{"at_least_once", "exactly_once"} {
		t.Run(guarantee, func(t *testing.T) {
			parallel(t)
			r := newPlacementRig(t)
			c := connectNotices(r.ctx, t, r.srv)
			defer c.Close(r.ctx)
			with := fmt.Sprintf(" WITH (processing_guarantee = '%s')", guarantee)
			r.exec(misplacedSource,
				`CREATE STREAM per_user`+with+` AS `+perUser,
				fmt.Sprintf(`CREATE STREAM per_user_rep WITH (processing_guarantee = '%s', strategy = 'repartition') AS %s`, guarantee, perUser),
				fmt.Sprintf(`CREATE STREAM per_user_cmb WITH (processing_guarantee = '%s', strategy = 'combine') AS %s`, guarantee, perUser),
				`CREATE STREAM all_n`+with+` AS SELECT TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM ev GROUP BY TUMBLE(ts, INTERVAL '1' MINUTE)`,
				`CREATE STREAM copy`+with+` AS SELECT user_id, amount FROM ev`)
			if row := showRow(r.ctx, t, c.Conn, "per_user"); row[3] != "local" {
				t.Fatalf("per_user planned %v before any misplacement is known, want local", row[3])
			}
			count, total := misplacedInput(r.ctx, t, r.srv.KafkaAddrs(), r.conn)
			c.takeNotices()
			if _, err := c.Exec(r.ctx, "FLUSH"); err != nil {
				t.Fatal(err)
			}
			// Seen where users look: FLUSH warns.
			ws := warningsFor(c.takeNotices(), "per_user")
			if len(ws) != 1 || !strings.Contains(ws[0].Detail, "strategy = 'repartition'") || !strings.Contains(ws[0].Detail, "murmur2") {
				t.Fatalf("FLUSH warnings for per_user: %+v", ws)
			}

			// The bug: one user, two panes, each a part of the truth.
			split := 0
			for u, ps := range userPanes(r.ctx, t, c.Conn, "per_user") {
				if len(ps) > 1 {
					split++
					if ps[0][0]+ps[1][0] != count[u] {
						t.Fatalf("per_user: panes of %s %v do not add up to %d", u, ps, count[u])
					}
				}
			}
			if split == 0 {
				t.Fatal("per_user: no user has two panes; the local plan's split is not reproduced")
			}

			// So does a SELECT of it, SHOW STREAMS and the console.
			if ws := warningsFor(c.takeNotices(), "per_user"); len(ws) != 1 {
				t.Fatalf("SELECT of per_user: warnings %+v, want one", ws)
			}
			status, msg := streamStatus(r.ctx, t, c.Conn, "per_user")
			for _, want := range []string{"input misplaced", `topic "ev"`, "murmur2 on user_id", "ALTER STREAM per_user SET (strategy = 'repartition')", "partitioner=murmur2_random"} {
				if status != "degraded" || !strings.Contains(msg, want) {
					t.Fatalf("SHOW STREAMS per_user: %q %q, want degraded naming %q", status, msg, want)
				}
			}
			if cs := consoleStream(t, r, "per_user"); cs.Status != "degraded" || cs.Error != msg {
				t.Fatalf("console: %q %q, want SHOW STREAMS' %q %q", cs.Status, cs.Error, status, msg)
			}
			for _, name := range []string{"per_user_rep", "per_user_cmb", "all_n", "copy"} {
				if status, msg := streamStatus(r.ctx, t, c.Conn, name); status != "running" {
					t.Fatalf("%s does not rely on placement, but SHOW STREAMS says %q %q", name, status, msg)
				}
			}
			exactPanes(r.ctx, t, c.Conn, "per_user_rep", count, total)
			exactPanes(r.ctx, t, c.Conn, "per_user_cmb", count, total)
			if ns := c.takeNotices(); len(ns) != 0 {
				t.Fatalf("SELECT of streams that are right warned: %+v", ns)
			}
			var all int64
			if err := c.QueryRow(r.ctx, "SELECT n FROM all_n WHERE ws = TIMESTAMP '2026-01-01 00:00:00'").Scan(&all); err != nil || all != 120 {
				t.Fatalf("all_n: %d, %v; want 120", all, err)
			}

			// The verdict is kept with the state: still degraded after a restart.
			c.Close(r.ctx)
			r.restart()
			c = connectNotices(r.ctx, t, r.srv)
			defer c.Close(r.ctx)
			if status, msg := streamStatus(r.ctx, t, c.Conn, "per_user"); status != "degraded" || !strings.Contains(msg, "input misplaced") {
				t.Fatalf("per_user after a restart: %q %q, want degraded", status, msg)
			}

			// A new statement over the input: auto re-keys, local is warned of.
			text := explainText(t, c, r, "EXPLAIN CREATE STREAM again AS "+perUser)
			for _, want := range []string{"Strategy: repartition (rule MisplacedInput:", "Repartition by user_id", "stream per_user saw it on partition(s)", "so the planner re-keys the records by user_id"} {
				if !strings.Contains(text, want) {
					t.Fatalf("EXPLAIN over a misplaced input lacks %q:\n%s", want, text)
				}
			}
			text = explainText(t, c, r, "EXPLAIN CREATE STREAM again WITH (strategy = 'local') AS "+perUser)
			for _, want := range []string{"Strategy: local", "WARNING: Placement: the records of ev are not placed by murmur2 on user_id", "use strategy = 'repartition'"} {
				if !strings.Contains(text, want) {
					t.Fatalf("EXPLAIN of a local plan over a misplaced input lacks %q:\n%s", want, text)
				}
			}
			c.takeNotices()
			if _, err := c.Exec(r.ctx, "CREATE STREAM kept_local WITH (strategy = 'local') AS "+perUser); err != nil {
				t.Fatal(err)
			}
			if ns := c.takeNotices(); len(ns) != 1 || ns[0].Severity != "WARNING" || !strings.Contains(ns[0].Message, "this local plan emits each key's groups in pieces") {
				t.Fatalf("CREATE STREAM ... strategy = 'local' over a misplaced input: notices %+v", ns)
			}
			r.exec("DROP STREAM kept_local")
			if _, err := c.Exec(r.ctx, "CREATE STREAM per_user_auto"+with+" AS "+perUser); err != nil {
				t.Fatal(err)
			}
			if ns := c.takeNotices(); len(ns) != 1 || !strings.Contains(ns[0].Message, "planned with a repartition hop by user_id") {
				t.Fatalf("CREATE STREAM over a misplaced input: notices %+v", ns)
			}
			if row := showRow(r.ctx, t, c.Conn, "per_user_auto"); row[3] != "repartition" {
				t.Fatalf("per_user_auto created over a misplaced input planned %v, want repartition", row[3])
			}

			// The way out.
			c.takeNotices()
			if _, err := c.Exec(r.ctx, "ALTER STREAM per_user SET (strategy = 'repartition')"); err != nil {
				t.Fatal(err)
			}
			ns := c.takeNotices()
			if len(ns) != 1 || !strings.Contains(ns[0].Message, "re-planned with strategy repartition (was local)") || !strings.Contains(ns[0].Detail, "nothing of its state is kept") {
				t.Fatalf("ALTER STREAM ... SET notices: %+v", ns)
			}
			if _, err := c.Exec(r.ctx, "FLUSH"); err != nil {
				t.Fatal(err)
			}
			if ws := c.takeNotices(); len(ws) != 0 {
				t.Fatalf("FLUSH after the re-plan warned: %+v", ws)
			}
			if row := showRow(r.ctx, t, c.Conn, "per_user"); row[3] != "repartition" || row[4] != "running" || row[11] != nil {
				t.Fatalf("SHOW STREAMS per_user after the re-plan: %v", row)
			}
			exactPanes(r.ctx, t, c.Conn, "per_user", count, total)
			exactPanes(r.ctx, t, c.Conn, "per_user_auto", count, total)
			var create string
			if err := c.QueryRow(r.ctx, "SHOW CREATE STREAM per_user").Scan(new(string), &create); err != nil || !strings.Contains(create, "strategy = 'repartition'") {
				t.Fatalf("SHOW CREATE STREAM per_user: %q, %v", create, err)
			}

			// The new plan is the stream's from now on.
			r.restart()
			c2 := connectNotices(r.ctx, t, r.srv)
			defer c2.Close(r.ctx)
			r.exec("FLUSH")
			for _, name := range []string{"per_user", "per_user_auto"} {
				if row := showRow(r.ctx, t, c2.Conn, name); row[3] != "repartition" || row[4] != "running" {
					t.Fatalf("SHOW STREAMS %s after a restart: %v", name, row)
				}
				exactPanes(r.ctx, t, c2.Conn, name, count, total)
			}
		})
	}
}

// explainText runs an EXPLAIN and returns its lines.
func explainText(t *testing.T, c *noticeConn, r *placementRig, q string) string {
	t.Helper()
	res, err := c.Query(r.ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	var plan []string
	for res.Next() {
		var l string
		if err := res.Scan(&l); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, l)
	}
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}

// TestReplanAcrossNodes: two nodes share a local stream over a misplaced
// input; ALTER STREAM ... SET on one re-plans it on both (each stops the
// old plan before the state goes, and follows the catalog record into the
// new one), the re-computed panes are exact, and stay so, once each,
// after the other node restarts.
func TestReplanAcrossNodes(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	addr, start := appNodes(t, 4, "replan", func(c *Config) { c.SessionTimeout = 6 * time.Second })
	a := start(t.TempDir())
	defer func() { a.Close() }()
	dirB := t.TempDir()
	b := start(dirB)
	defer func() { b.Close() }()
	ca := connect(ctx, t, a)
	defer ca.Close(ctx)
	execAll(ctx, t, ca, misplacedSource, "CREATE STREAM per_user AS "+perUser)
	waitOwned(t, "both nodes to run per_user", func() bool { return ownsTasks(a, "per_user") && ownsTasks(b, "per_user") })
	count, total := misplacedInput(ctx, t, addr, ca)
	execAll(ctx, t, ca, "FLUSH")
	for _, srv := range []*Server{a, b} {
		if got := statusOn(ctx, t, srv, "per_user"); got != "degraded" {
			t.Fatalf("per_user on %s: %q, want degraded", srv.nodeID, got)
		}
	}

	execAll(ctx, t, ca, "ALTER STREAM per_user SET (strategy = 'repartition')")
	plannedOn := func(srv *Server) string {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		if r := srv.streams["per_user"]; r != nil && r.plan != nil && !r.stopped && r.final != nil && len(r.final.Owned()) > 0 {
			return r.plan.Strategy.String()
		}
		return ""
	}
	waitOwned(t, "both nodes to run per_user through the hop", func() bool {
		return plannedOn(a) == "repartition" && plannedOn(b) == "repartition"
	})
	execAll(ctx, t, ca, "FLUSH")
	cb := connect(ctx, t, b)
	exactPanes(ctx, t, cb, "per_user", count, total)
	cb.Close(ctx)
	for _, srv := range []*Server{a, b} {
		if got := statusOn(ctx, t, srv, "per_user"); got != "running" {
			t.Fatalf("per_user on %s after the re-plan: %q, want running", srv.nodeID, got)
		}
	}

	b.Close()
	b = start(dirB)
	waitOwned(t, "b to run per_user through the hop after its restart", func() bool { return plannedOn(b) == "repartition" })
	execAll(ctx, t, ca, "FLUSH")
	cb = connect(ctx, t, b)
	defer cb.Close(ctx)
	exactPanes(ctx, t, cb, "per_user", count, total)
}
