package rescale_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/rescale"
	"github.com/turbinesql/turbinesql/server"
	"github.com/turbinesql/turbinesql/state"
)

// app is one TurbineSQL app on a broker of its own, run by in-process
// servers on data dirs that outlive them.
type app struct {
	t     *testing.T
	addr  []string
	k     *kafkaio.Client
	id    string
	dirs  []string
	nodes []*server.Server
	// allowNonDivisor starts the servers with
	// TURBINE_ALLOW_NON_DIVISOR_PARTITIONS=1.
	allowNonDivisor bool
	// topic is source ev's topic: "ev" on a broker of the test's own, a
	// name of its own on a shared one.
	topic string
	// out prefixes the output topics' names: "" on a broker of the
	// test's own, the app id on a shared one (a stream's topic is not
	// named after its app).
	out string
}

// newApp makes an app on a kfake broker of its own, or, with
// TURBINE_TEST_BROKERS set (make test-kafka runs the central tests on
// Apache Kafka), on that cluster under an app id and topic of its own.
func newApp(t *testing.T, nodes int) *app {
	t.Helper()
	a := &app{t: t, id: "rs", topic: "ev"}
	if shared := os.Getenv("TURBINE_TEST_BROKERS"); shared != "" {
		a.addr = strings.Split(shared, ",")
		a.id = fmt.Sprintf("rs-%d", time.Now().UnixNano())
		a.topic, a.out = a.id+"-ev", a.id+"-"
	} else {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cluster.Close)
		a.addr = cluster.ListenAddrs()
	}
	var err error
	if a.k, err = kafkaio.New(&kafkaio.Conn{Brokers: a.addr}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.k.Close)
	for range nodes {
		a.dirs = append(a.dirs, t.TempDir())
	}
	return a
}

// start starts a server on each data dir.
func (a *app) start(ctx context.Context) {
	a.t.Helper()
	for _, dir := range a.dirs {
		a.nodes = append(a.nodes, a.startOn(ctx, dir))
	}
}

// startOn starts a server on data dir dir.
func (a *app) startOn(ctx context.Context, dir string) *server.Server {
	a.t.Helper()
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("TURBINE_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	srv, err := server.Start(ctx, server.Config{DataDir: dir, PGAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Brokers: a.addr,
		AppID: a.id, Logger: log, CommitInterval: 50 * time.Millisecond, SessionTimeout: 6 * time.Second,
		MetadataInterval: 500 * time.Millisecond, AllowNonDivisor: a.allowNonDivisor})
	if err != nil {
		a.t.Fatalf("start server: %v", err)
	}
	return srv
}

// stop closes every server.
func (a *app) stop() {
	for _, s := range a.nodes {
		s.Close()
	}
	a.nodes = nil
}

func (a *app) exec(ctx context.Context, qs ...string) {
	a.t.Helper()
	conn, err := pgx.Connect(ctx, "postgres://turbine@"+a.nodes[0].PGAddr()+"/turbine?sslmode=disable")
	if err != nil {
		a.t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range qs {
		if _, err := conn.Exec(ctx, q); err != nil {
			a.t.Fatalf("%s: %v", q, err)
		}
	}
}

// flushOnceRunning is FLUSH after a start that restores much state: the
// server's FLUSH waits a minute for every task to run, and restoring the
// rescaled changelog of 200,000 keys under the whole suite's load (-race)
// took longer; FLUSH is asked again (55006) until ctx ends.
func (a *app) flushOnceRunning(ctx context.Context) {
	a.t.Helper()
	conn, err := pgx.Connect(ctx, "postgres://turbine@"+a.nodes[0].PGAddr()+"/turbine?sslmode=disable")
	if err != nil {
		a.t.Fatal(err)
	}
	defer conn.Close(ctx)
	for {
		_, err := conn.Exec(ctx, "FLUSH")
		var pe *pgconn.PgError
		if err == nil || !errors.As(err, &pe) || pe.Code != "55006" || ctx.Err() != nil {
			if err != nil {
				a.t.Fatalf("FLUSH: %v", err)
			}
			return
		}
		a.t.Logf("FLUSH: %v; again", err)
	}
}

// panes reads the stream's panes "k ws n sum", sorted.
func (a *app) panes(ctx context.Context, stream string, before int64) []string {
	a.t.Helper()
	conn, err := pgx.Connect(ctx, "postgres://turbine@"+a.nodes[0].PGAddr()+"/turbine?sslmode=disable")
	if err != nil {
		a.t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT k, ws, n, s FROM "+stream)
	if err != nil {
		a.t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var k string
		var ws time.Time
		var n, s int64
		if err := rows.Scan(&k, &ws, &n, &s); err != nil {
			a.t.Fatal(err)
		}
		if ws.UnixMilli() < before {
			out = append(out, fmt.Sprintf("%s %d %d %d", k, ws.UnixMilli(), n, s))
		}
	}
	if err := rows.Err(); err != nil {
		a.t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// event is one input row.
type event struct {
	k  string
	x  int64
	ts int64 // ms
}

// produce writes events, each keyed by k and placed with murmur2 under
// n partitions (as a Java producer of the topic's current count would).
func (a *app) produce(ctx context.Context, evs []event, n int) {
	a.t.Helper()
	var recs []*kafkaio.Record
	for _, e := range evs {
		v, _ := json.Marshal(map[string]any{"k": e.k, "x": e.x, "ts": e.ts})
		recs = append(recs, &kafkaio.Record{Topic: a.topic, Partition: state.PartitionFor([]byte(e.k), n), Key: []byte(e.k), Value: v})
	}
	if err := a.k.ProduceSync(ctx, recs); err != nil {
		a.t.Fatal(err)
	}
}

const minute = 60_000

// input is a seeded input: keys k0..k(keys-1), rows in increasing time
// over [0, span), each key at most once per ms.
func input(seed uint64, keys, rows int, span int64) []event {
	r := rand.New(rand.NewPCG(seed, 1))
	evs := make([]event, rows)
	for i := range evs {
		evs[i] = event{k: fmt.Sprintf("k%d", r.IntN(keys)), x: int64(r.IntN(100)), ts: int64(i) * span / int64(rows)}
	}
	return evs
}

// expected computes the panes of a 1-minute tumbling COUNT and SUM per key.
func expected(evs []event) []string {
	type pane struct{ n, s int64 }
	m := map[string]*pane{}
	for _, e := range evs {
		key := fmt.Sprintf("%s %d", e.k, e.ts/minute*minute)
		if m[key] == nil {
			m[key] = &pane{}
		}
		m[key].n++
		m[key].s += e.x
	}
	var out []string
	for k, p := range m {
		out = append(out, fmt.Sprintf("%s %d %d", k, p.n, p.s))
	}
	slices.Sort(out)
	return out
}

// closers are rows far past the input, one on each of n partitions, so
// every partition's watermark passes every window of the input.
func closers(n int, ts int64) []event {
	var out []event
	for p := range n {
		for i := 0; ; i++ {
			k := fmt.Sprintf("close%d", i)
			if int(state.PartitionFor([]byte(k), n)) == p {
				out = append(out, event{k: k, ts: ts})
				break
			}
		}
	}
	return out
}

const (
	sourceSQL = `CREATE SOURCE ev (k TEXT, x BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = '%s', partitions = %d, partition_key = 'k')`
	streamSQL = `CREATE STREAM w WITH (topic = '%sw') AS SELECT k, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n, SUM(x) AS s FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`
)

// rescaled runs the central scenario: the first half of a seeded
// input on `from` partitions and two servers; both stop; the topic grows
// to `to`; rescale (when tool is set); both restart; the second half is
// placed under `to`. It returns the panes and the expected ones.
func rescaled(t *testing.T, from, to int, tool bool) (got, want []string, sum rescale.Summary, out string) {
	return rescaledWith(t, from, to, tool, nil)
}

// rescaledWith is rescaled with a rescale interrupted where interrupt
// says, then run again to the end.
func rescaledWith(t *testing.T, from, to int, tool bool, interrupt func(stream, phase string) bool) (got, want []string, sum rescale.Summary, out string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := newApp(t, 2)
	// Leaving a count that does not divide 960 starts on one.
	a.allowNonDivisor = !state.Divides(from)
	a.start(ctx)
	defer a.stop()
	a.exec(ctx, fmt.Sprintf(sourceSQL, a.topic, from), fmt.Sprintf(streamSQL, a.out))
	// 7 minutes of input; the cut at 3.5 leaves the window 3:00-4:00 open
	// across the rescale.
	const span = 7 * minute
	evs := input(42, 300, 6000, span)
	half := len(evs) / 2
	a.produce(ctx, evs[:half], from)
	a.exec(ctx, "FLUSH")
	a.stop()
	if err := a.k.CreatePartitions(ctx, a.topic, to); err != nil {
		t.Fatal(err)
	}
	if tool {
		var b strings.Builder
		var err error
		if interrupt != nil {
			_, err := rescale.Run(ctx, a.k, rescale.Options{AppID: a.id, To: to, DataDirs: a.dirs, Out: &b, Interrupt: interrupt})
			if !errors.Is(err, rescale.ErrInterrupted) {
				t.Fatalf("interrupted rescale: %v\n%s", err, b.String())
			}
		}
		sum, err = rescale.Run(ctx, a.k, rescale.Options{AppID: a.id, To: to, DataDirs: a.dirs, Out: &b})
		out = b.String()
		if err != nil {
			t.Fatalf("rescale: %v\n%s", err, out)
		}
	}
	a.start(ctx)
	a.produce(ctx, evs[half:], to)
	a.produce(ctx, closers(to, span+10*minute), to)
	a.exec(ctx, "FLUSH")
	if tool {
		a.checkCounts(ctx, from, to)
	}
	return a.panes(ctx, "w", span), expected(evs), sum, out
}

// checkCounts checks that the rescale to `to` is in every partition's
// count history: after `from` on the old partitions, alone on the new.
func (a *app) checkCounts(ctx context.Context, from, to int) {
	a.t.Helper()
	hist := a.counts(ctx)
	for p := range to {
		want := fmt.Sprint(to)
		if p < from {
			want = fmt.Sprintf("%d,%d", from, to)
		}
		if hist[p] != want {
			a.t.Errorf("partition %d: counts %q, want %q (all: %v)", p, hist[p], want, hist)
		}
	}
}

// counts collects SHOW PARTITIONS w's count history per partition from
// every node (each shows the partitions it runs).
func (a *app) counts(ctx context.Context) map[int]string {
	a.t.Helper()
	out := map[int]string{}
	for _, n := range a.nodes {
		conn, err := pgx.Connect(ctx, "postgres://turbine@"+n.PGAddr()+"/turbine?sslmode=disable")
		if err != nil {
			a.t.Fatal(err)
		}
		rows, err := conn.Query(ctx, "SHOW PARTITIONS w")
		if err != nil {
			a.t.Fatal(err)
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				a.t.Fatal(err)
			}
			if c, ok := vals[3].(string); ok && vals[1] != nil {
				out[int(vals[0].(int64))] = c
			}
		}
		rows.Close()
		conn.Close(ctx)
	}
	return out
}

// TestRescaleCentral is the central test, 4 -> 8: after the
// rescale every pane equals the one a never-rescaled run gives (computed
// from the input), the window open across the rescale included.
func TestRescaleCentral(t *testing.T) {
	got, want, sum, out := rescaled(t, 4, 8, true)
	t.Log(out)
	if !slices.Equal(got, want) {
		t.Fatalf("%d panes, want %d; first differences:\n%s", len(got), len(want), diff(got, want))
	}
	if len(sum.Streams) != 1 || sum.Streams[0].Groups != 480 || sum.Streams[0].Records == 0 {
		t.Errorf("summary %+v, want stream w with 480 key groups moved", sum.Streams)
	}
}

// TestRescaleStoppedStream is the central test without stopping the app:
// ALTER STREAM w STOP, grow the topic with ALTER SOURCE, rescale w alone
// while the servers (and another stream) run, ALTER STREAM w START. One
// server is down through all of it and starts after the START, on its
// data dir from before the rescale: it must not run on that copy. Every
// pane equals a never-rescaled run's; the stream that was not stopped
// reads every row.
func TestRescaleStoppedStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const from, to = 4, 8
	a := newApp(t, 3)
	a.start(ctx)
	defer a.stop()
	a.exec(ctx, fmt.Sprintf(sourceSQL, a.topic, from), fmt.Sprintf(streamSQL, a.out), fmt.Sprintf(`CREATE STREAM raw WITH (topic = '%sraw') AS SELECT k, x FROM ev`, a.out))
	const span = 7 * minute
	evs := input(7, 300, 6000, span)
	half := len(evs) / 2
	a.produce(ctx, evs[:half], from)
	a.exec(ctx, "FLUSH")
	a.nodes[2].Close()
	a.nodes = a.nodes[:2]

	cfg, err := pgx.ParseConfig("postgres://turbine@" + a.nodes[0].PGAddr() + "/turbine?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	var notices []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices = append(notices, n.Severity+": "+n.Message) }
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "ALTER STREAM w STOP"); err != nil {
		t.Fatal(err)
	}
	if len(notices) > 0 {
		t.Fatalf("STOP returned notices %q; want the groups left on every node", notices)
	}
	// The rescale may run at once: STOP returned once no node is a member.
	if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER SOURCE ev SET (partitions = %d)", to)); err != nil {
		t.Fatal(err)
	}
	if len(notices) != 1 || !strings.HasPrefix(notices[0], "NOTICE: stopped keyed stateful streams read topic") {
		t.Errorf("ALTER SOURCE said %q; want one NOTICE naming w, to rescale before START (w is stopped, nothing else keeps keyed state)", notices)
	}
	var b strings.Builder
	sum, err := rescale.Run(ctx, a.k, rescale.Options{AppID: a.id, To: to, Streams: []string{"w"}, Out: &b})
	if err != nil {
		t.Fatalf("rescale: %v\n%s", err, b.String())
	}
	if len(sum.Streams) != 1 || sum.Streams[0].Groups != 480 {
		t.Fatalf("summary %+v, want stream w with 480 key groups moved\n%s", sum.Streams, b.String())
	}
	// START on the other node: the first follows it.
	c1, err := pgx.Connect(ctx, "postgres://turbine@"+a.nodes[1].PGAddr()+"/turbine?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close(ctx)
	if _, err := c1.Exec(ctx, "ALTER STREAM w START"); err != nil {
		t.Fatal(err)
	}
	a.nodes = append(a.nodes, a.startOn(ctx, a.dirs[2]))
	a.produce(ctx, evs[half:], to)
	a.produce(ctx, closers(to, span+10*minute), to)
	a.exec(ctx, "FLUSH")
	if got, want := a.panes(ctx, "w", span), expected(evs); !slices.Equal(got, want) {
		t.Fatalf("%d panes, want %d; first differences:\n%s", len(got), len(want), diff(got, want))
	}
	// The servers' copies from before the rescale were not used: a copy
	// restored past by the changelog's tail keeps its count history "4".
	a.checkCounts(ctx, from, to)
	var raw int
	if err := conn.QueryRow(ctx, "SELECT COUNT(*) FROM raw").Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if raw != len(evs)+to {
		t.Errorf("raw has %d rows, want %d: the stream that was not stopped missed rows", raw, len(evs)+to)
	}
}

// TestRescaleCounts repeats it for 8 -> 24 (each group of partition p
// goes to p, p+8 or p+16) and 1 -> 4, and for leaving counts that do not
// divide 960, 7 -> 8 and 100 -> 120, where each partition holds keys of
// every key group and keys move one by one to their group mod M.
func TestRescaleCounts(t *testing.T) {
	for _, c := range [][2]int{{8, 24}, {1, 4}, {7, 8}, {100, 120}} {
		t.Run(fmt.Sprintf("%d_to_%d", c[0], c[1]), func(t *testing.T) {
			got, want, _, _ := rescaled(t, c[0], c[1], true)
			if !slices.Equal(got, want) {
				t.Fatalf("%d panes, want %d; first differences:\n%s", len(got), len(want), diff(got, want))
			}
		})
	}
}

// TestRescaleInterrupted stops a rescale after its first copies (into
// partition 5 of 8: some groups copied, most not), after every copy, and
// after the tombstones, then runs it again: every pane is still right, no
// group lost or counted twice.
//
// The same from 7 (keys moved one by one).
func TestRescaleInterrupted(t *testing.T) {
	for _, c := range []struct {
		from int
		at   string
	}{{4, "copied into 5"}, {4, "copied"}, {4, "tombstoned"}, {7, "copied into 3"}, {7, "copied"}, {7, "tombstoned"}} {
		at := c.at
		t.Run(fmt.Sprintf("%d_%s", c.from, strings.ReplaceAll(at, " ", "_")), func(t *testing.T) {
			stopped := false
			got, want, _, out := rescaledWith(t, c.from, 8, true, func(_, phase string) bool {
				if phase == at {
					stopped = true
				}
				return phase == at
			})
			if !stopped {
				t.Fatalf("never reached %q", at)
			}
			if !strings.Contains(out, fmt.Sprintf("resuming an interrupted rescale from %d to 8", c.from)) {
				t.Errorf("the second run did not resume:\n%s", out)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%d panes, want %d; first differences:\n%s", len(got), len(want), diff(got, want))
			}
		})
	}
}

// TestGrowWithoutTool is the path without the tool: the keys that moved
// start empty on their new partition, so the window open across the
// change is split into two panes for exactly those keys (and the check
// that TestRescaleCentral can fail), while every pane of a key that did
// not move is whole. The same when leaving a count that does not divide
// 960 (7 -> 8, 100 -> 120): a key's state is grouped the same way on
// every count, so a key that stayed finds it (it used to be grouped by
// hash mod 7 there, and looked up by hash mod 960 after the change: every
// key lost its state).
func TestGrowWithoutTool(t *testing.T) {
	for _, c := range [][2]int{{4, 8}, {7, 8}, {100, 120}} {
		t.Run(fmt.Sprintf("%d_to_%d", c[0], c[1]), func(t *testing.T) {
			from, to := c[0], c[1]
			got, want, _, _ := rescaled(t, from, to, false)
			checkSplit(t, got, want, func(k string) bool {
				return state.PartitionFor([]byte(k), from) != state.PartitionFor([]byte(k), to)
			})
		})
	}
}

// checkSplit checks panes after a count change without the tool: a key
// that did not move has exactly its panes; a key that moved has each pane
// either whole or split in two (the rows of each partition), whose counts
// and sums add up to it, and at least one key is split.
func checkSplit(t *testing.T, got, want []string, moved func(k string) bool) {
	t.Helper()
	type pane struct{ n, s int64 }
	parse := func(lines []string) map[string][]pane {
		out := map[string][]pane{}
		for _, l := range lines {
			var k string
			var ws, n, s int64
			if _, err := fmt.Sscanf(l, "%s %d %d %d", &k, &ws, &n, &s); err != nil {
				t.Fatalf("pane %q: %v", l, err)
			}
			id := fmt.Sprintf("%s %d", k, ws)
			out[id] = append(out[id], pane{n, s})
		}
		return out
	}
	g, w := parse(got), parse(want)
	split := 0
	for id, wp := range w {
		k := strings.Fields(id)[0]
		gp := g[id]
		if !moved(k) {
			if fmt.Sprint(gp) != fmt.Sprint(wp) {
				t.Errorf("key %s did not move: pane %s is %v, want %v", k, id, gp, wp)
			}
			continue
		}
		var n, s int64
		for _, p := range gp {
			n, s = n+p.n, s+p.s
		}
		if len(gp) > 2 || n != wp[0].n || s != wp[0].s {
			t.Errorf("key %s moved: pane %s is %v, want %v whole or split in two", k, id, gp, wp)
		}
		if len(gp) == 2 {
			split++
		}
	}
	for id := range g {
		if _, ok := w[id]; !ok {
			t.Errorf("pane %s %v of no input", id, g[id])
		}
	}
	if split == 0 {
		t.Error("no pane split: the test shows nothing")
	}
}

// diff lists the first lines only one side has.
func diff(got, want []string) string {
	var b strings.Builder
	n := 0
	for _, g := range got {
		if !slices.Contains(want, g) && n < 10 {
			fmt.Fprintf(&b, "+ %s\n", g)
			n++
		}
	}
	for _, w := range want {
		if !slices.Contains(got, w) && n < 20 {
			fmt.Fprintf(&b, "- %s\n", w)
			n++
		}
	}
	return b.String()
}

var _ = io.Discard

// TestRescaleRefusals: each refusal names its reason, and writes nothing
// (the changelogs and the input topic are as they were).
func TestRescaleRefusals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := newApp(t, 1)
	a.start(ctx)
	defer a.stop()
	a.exec(ctx, fmt.Sprintf(sourceSQL, a.topic, 4), fmt.Sprintf(streamSQL, a.out),
		`CREATE STREAM eo WITH (processing_guarantee = 'exactly_once') AS SELECT k, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`,
		`CREATE STREAM r WITH (strategy = 'repartition') AS SELECT k, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`,
		`CREATE STREAM copy AS SELECT k, ts FROM ev`)
	a.produce(ctx, input(7, 50, 500, 3*minute), 4)
	a.exec(ctx, "FLUSH")
	refused := func(want string, opts rescale.Options) {
		t.Helper()
		opts.AppID = a.id
		if opts.To == 0 {
			opts.To = 8
		}
		_, err := rescale.Run(ctx, a.k, opts)
		var r *rescale.RefusedError
		if !errors.As(err, &r) || !strings.Contains(err.Error(), want) {
			t.Errorf("rescale %+v: %v, want a refusal saying %q", opts, err, want)
		}
	}
	// A wrong app id: the refusal names the apps the cluster has.
	if _, err := rescale.Run(ctx, a.k, rescale.Options{AppID: "nope", To: 8}); err == nil ||
		!strings.Contains(err.Error(), "app nope has no catalog topic turbine-nope-catalog: is the app id right? (apps on this cluster: "+a.id+")") {
		t.Errorf("wrong app id: %v", err)
	}
	// Running: its data dir is held, its groups have members.
	refused("is in use by another TurbineSQL server", rescale.Options{DataDirs: a.dirs})
	refused("has live members", rescale.Options{})
	a.stop()

	ends := func() string {
		var b strings.Builder
		for _, topic := range []string{"turbine-rs-w-changelog", "turbine-rs-eo-changelog", a.topic} {
			e, err := a.k.EndOffsets(ctx, topic)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s %v; ", topic, e)
		}
		return b.String()
	}
	was := ends()
	refused("--to 7 does not divide 960", rescale.Options{To: 7})
	refused("Kafka cannot shrink topic ev to 2", rescale.Options{To: 2, Streams: []string{"w"}})
	refused("stream eo is exactly-once", rescale.Options{Streams: []string{"eo"}})
	refused("start it under a new app id at the target count", rescale.Options{Streams: []string{"eo"}})
	// A hop's state follows its internal topic: nothing to move.
	if sum, err := rescale.Run(ctx, a.k, rescale.Options{AppID: a.id, To: 8, Streams: []string{"r"}}); err != nil ||
		len(sum.Streams) != 1 || !strings.Contains(sum.Streams[0].Skipped, "keyed by its hop's internal topic") {
		t.Errorf("repartition stream: %+v, %v", sum, err)
	}
	refused("stream eo is exactly-once", rescale.Options{}) // all: one refusal stops everything
	refused(`app rs has no stream "nope"`, rescale.Options{Streams: []string{"nope"}})
	if sum, err := rescale.Run(ctx, a.k, rescale.Options{AppID: a.id, To: 8, Streams: []string{"copy"}}); err != nil ||
		len(sum.Streams) != 1 || sum.Streams[0].Skipped != "no keyed state: nothing to move" {
		t.Errorf("stateless stream: %+v, %v", sum, err)
	}
	if now := ends(); now != was {
		t.Errorf("refusals wrote: before %s, after %s", was, now)
	}

	// A record where murmur2 would not have put it: placement -1.
	a.start(ctx)
	k := "k1"
	wrong := (state.PartitionFor([]byte(k), 4) + 1) % 4
	v, _ := json.Marshal(map[string]any{"k": k, "x": 1, "ts": 3 * minute})
	if err := a.k.ProduceSync(ctx, []*kafkaio.Record{{Topic: a.topic, Partition: wrong, Key: []byte(k), Value: v}}); err != nil {
		t.Fatal(err)
	}
	a.exec(ctx, "FLUSH")
	a.stop()
	refused(fmt.Sprintf("partition %d's placement verdict is -1", wrong), rescale.Options{Streams: []string{"w"}})

}

// TestRescaleRefusesStateItCannotSplit: the refusals of state the tool
// cannot split by key, each naming its reason and writing nothing.
//
//   - State left on 7 partitions by a change of count without the tool
//     (4 -> 7, an upsert stream whose keys that moved have state on their
//     old partition and their new one): on a count that does not divide
//     960 the start-up cleanup never runs, and which copy is live cannot
//     be told from a key group.
//   - State on 7 partitions written by an earlier release, grouped by
//     hash mod 7 (here: its record that it is keyed by groups of 960
//     deleted from the changelog).
//   - A stateful stream without a partition key its state is split by:
//     keyed state and no placement check (here: its placement records
//     deleted, as a stream that ran before the check kept them). A stream
//     on a source without partition_key is planned behind a hop, whose
//     topic keeps its count: nothing to move.
func TestRescaleRefusesStateItCannotSplit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	refused := func(a *app, stream, want string) {
		t.Helper()
		topics := []string{a.topic, "turbine-" + a.id + "-" + stream + "-changelog"}
		ends := func() string {
			var b strings.Builder
			for _, topic := range topics {
				e, err := a.k.EndOffsets(ctx, topic)
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(&b, "%s %v; ", topic, e)
			}
			return b.String()
		}
		was := ends()
		_, err := rescale.Run(ctx, a.k, rescale.Options{AppID: a.id, To: 8, DataDirs: a.dirs})
		var r *rescale.RefusedError
		if !errors.As(err, &r) || !strings.Contains(err.Error(), want) {
			t.Errorf("rescale: %v, want a refusal saying %q", err, want)
		}
		if now := ends(); now != was {
			t.Errorf("the refusal wrote: before %s, after %s", was, now)
		}
	}
	// deleteTask deletes a task value of stream from every partition of
	// its changelog.
	deleteTask := func(a *app, stream, name string, parts int) {
		t.Helper()
		var recs []*kafkaio.Record
		for p := range int32(parts) {
			recs = append(recs, &kafkaio.Record{Topic: "turbine-" + a.id + "-" + stream + "-changelog", Partition: p, Key: state.TaskKey(stream, p, name)})
		}
		if err := a.k.ProduceSync(ctx, recs); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("two_copies", func(t *testing.T) {
		a := newApp(t, 1)
		a.allowNonDivisor = true
		a.start(ctx)
		defer a.stop()
		a.exec(ctx, fmt.Sprintf(sourceSQL, a.topic, 4), fmt.Sprintf(`CREATE STREAM up WITH (topic = '%sup') AS SELECT k, COUNT(*) AS n FROM ev GROUP BY k`, a.out))
		evs := input(3, 50, 200, minute)
		a.produce(ctx, evs, 4)
		a.exec(ctx, "FLUSH")
		a.stop()
		if err := a.k.CreatePartitions(ctx, a.topic, 7); err != nil {
			t.Fatal(err)
		}
		a.start(ctx)
		a.produce(ctx, evs, 7)
		a.exec(ctx, "FLUSH")
		a.stop()
		refused(a, "up", "both hold state of one key")
	})

	t.Run("earlier_release", func(t *testing.T) {
		a := newApp(t, 1)
		a.allowNonDivisor = true
		a.start(ctx)
		defer a.stop()
		a.exec(ctx, fmt.Sprintf(sourceSQL, a.topic, 7), fmt.Sprintf(streamSQL, a.out))
		a.produce(ctx, input(7, 50, 200, 3*minute), 7)
		a.exec(ctx, "FLUSH")
		a.stop()
		deleteTask(a, "w", state.KeyGroupsKey, 7)
		refused(a, "w", "ran on a partition count that does not divide 960 under an earlier release")
	})

	t.Run("no_partition_key", func(t *testing.T) {
		a := newApp(t, 1)
		a.start(ctx)
		defer a.stop()
		a.exec(ctx, fmt.Sprintf(sourceSQL, a.topic, 4), fmt.Sprintf(streamSQL, a.out),
			fmt.Sprintf(`CREATE SOURCE nk (k TEXT, x BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = '%snk', partitions = 4)`, a.out),
			`CREATE STREAM nkw AS SELECT k, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM nk GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`)
		evs := input(5, 50, 200, 3*minute)
		a.produce(ctx, evs, 4)
		var recs []*kafkaio.Record
		for i, e := range evs {
			v, _ := json.Marshal(map[string]any{"k": e.k, "x": e.x, "ts": e.ts})
			recs = append(recs, &kafkaio.Record{Topic: a.out + "nk", Partition: int32(i % 4), Value: v})
		}
		if err := a.k.ProduceSync(ctx, recs); err != nil {
			t.Fatal(err)
		}
		a.exec(ctx, "FLUSH")
		a.stop()
		sum, err := rescale.Run(ctx, a.k, rescale.Options{AppID: a.id, To: 8, Streams: []string{"nkw"}})
		if err != nil || len(sum.Streams) != 1 || !strings.Contains(sum.Streams[0].Skipped, "keyed by its hop's internal topic") {
			t.Fatalf("a stream on a source without partition_key: %+v, %v", sum.Streams, err)
		}
		deleteTask(a, "w", "placement", 4)
		refused(a, "w", "stream w has no partition key its state is split by")
	})
}

// TestRescaleFigures rescales keys with open windows, 4 -> 8, and prints
// its figures: one row per key, spread over 20 one-minute windows, none
// closed when the servers stop (the watermark trails by an hour). After
// the rescale the windows are closed one at a time, and every key has its
// pane of 1. It runs on 20,000 keys; TURBINE_RESCALE_FIGURES=1 runs the
// README's 10^6.
func TestRescaleFigures(t *testing.T) {
	keys, windows := 20_000, 20
	if os.Getenv("TURBINE_RESCALE_FIGURES") != "" {
		keys = 1_000_000
	}
	batch := min(keys, 100_000)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	a := newApp(t, 1)
	a.start(ctx)
	defer a.stop()
	a.exec(ctx, fmt.Sprintf(`CREATE SOURCE ev (k TEXT, x BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' HOUR) WITH (topic = '%s', partitions = 4, partition_key = 'k')`, a.topic), fmt.Sprintf(streamSQL, a.out))
	began := time.Now()
	for i := 0; i < keys; i += batch {
		evs := make([]event, 0, batch)
		for j := i; j < i+batch; j++ {
			evs = append(evs, event{k: fmt.Sprintf("key%d", j), x: 1, ts: int64(j) * int64(windows) * minute / int64(keys)})
		}
		a.produce(ctx, evs, 4)
	}
	a.exec(ctx, "FLUSH")
	t.Logf("fed %d keys in %.1fs", keys, time.Since(began).Seconds())
	a.stop()
	var b strings.Builder
	sum, err := rescale.Run(ctx, a.k, rescale.Options{AppID: a.id, To: 8, DataDirs: a.dirs, Out: &b})
	if err != nil {
		t.Fatal(err, b.String())
	}
	t.Log(b.String())
	s := sum.Streams[0]
	t.Logf("FIGURES: %d keys 4 -> 8: %.1fs, %d key groups, %d records, %d bytes written", keys, sum.Elapsed.Seconds(), s.Groups, s.Records, s.Bytes)
	began = time.Now()
	a.start(ctx)
	for w := range windows {
		a.produce(ctx, closers(8, int64(61+w)*minute), 8)
		a.exec(ctx, "FLUSH")
	}
	t.Logf("restart, restore and close in %.1fs", time.Since(began).Seconds())
	conn, err := pgx.Connect(ctx, "postgres://turbine@"+a.nodes[0].PGAddr()+"/turbine?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var panes, rows int64
	if err := conn.QueryRow(ctx, "SELECT COUNT(*), SUM(n) FROM w WHERE ws < TIMESTAMP '1970-01-01 00:20:00'").Scan(&panes, &rows); err != nil {
		t.Fatal(err)
	}
	if panes != int64(keys) || rows != int64(keys) {
		t.Errorf("%d panes of %d rows after the rescale, want %d of %d", panes, rows, keys, keys)
	}
}

// TestRescaleKilled kills a rescale (SIGKILL, a child process running
// it) three times at different points of its writes, each run resuming
// the last, then lets a fourth run finish: every one of 200,000 keys
// still has exactly its pane.
//
// The same from 7 partitions, which does not divide 960 (keys moved one
// by one), on 100,000 keys.
func TestRescaleKilled(t *testing.T) {
	t.Run("4_to_8", func(t *testing.T) { rescaleKilled(t, 4, 200_000) })
	t.Run("7_to_8", func(t *testing.T) { rescaleKilled(t, 7, 100_000) })
}

func rescaleKilled(t *testing.T, from, keys int) {
	const windows = 4
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a := newApp(t, 2)
	a.allowNonDivisor = !state.Divides(from)
	a.start(ctx)
	defer a.stop()
	a.exec(ctx, fmt.Sprintf(`CREATE SOURCE ev (k TEXT, x BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' HOUR) WITH (topic = '%s', partitions = %d, partition_key = 'k')`, a.topic, from), fmt.Sprintf(streamSQL, a.out))
	evs := make([]event, 0, keys)
	for j := range keys {
		evs = append(evs, event{k: fmt.Sprintf("key%d", j), x: int64(j % 7), ts: int64(j) * windows * minute / int64(keys)})
	}
	// At once: one commit writes 200,000 new groups to the changelog,
	// more than a 1 MB batch holds (kafkaio keeps each batch under it).
	a.produce(ctx, evs, from)
	a.exec(ctx, "FLUSH")
	a.stop()
	if err := a.k.CreatePartitions(ctx, a.topic, 8); err != nil {
		t.Fatal(err)
	}
	args := []string{"RESCALE_CHILD_BROKERS=" + strings.Join(a.addr, ","), "RESCALE_CHILD_APP=" + a.id,
		"RESCALE_CHILD_DIRS=" + strings.Join(a.dirs, ",")}
	// Killed while copying, once every copy is written (while it marks
	// that, or tombstones), and once the tombstones are (positions).
	for i, kill := range []struct {
		at    string
		after time.Duration
	}{{"data dir", 700 * time.Millisecond}, {"key groups copied", 0}, {"tombstones where the groups left", 0}} {
		cmd := exec.CommandContext(ctx, os.Args[0])
		cmd.Env = append(os.Environ(), args...)
		var out lockedBuilder // written by the command's copier while read here
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		for !strings.Contains(out.String(), kill.at) {
			select {
			case err := <-exited:
				if !strings.Contains(out.String(), kill.at) {
					t.Fatalf("child exited (%v) before it printed %q:\n%s", err, kill.at, out.String())
				}
				exited <- err
			case <-ctx.Done():
				t.Fatalf("child never printed %q:\n%s", kill.at, out.String())
			case <-time.After(time.Millisecond):
			}
		}
		time.Sleep(kill.after)
		_ = cmd.Process.Kill()
		<-exited
		if strings.Contains(out.String(), childDone) {
			// The last step (positions) is short: the kill may come late.
			t.Logf("run %d finished before it was killed", i+1)
		}
		t.Logf("run %d killed %v after %q:\n%s", i+1, kill.after, kill.at, out.String())
	}
	var b strings.Builder
	if _, err := rescale.Run(ctx, a.k, rescale.Options{AppID: a.id, To: 8, DataDirs: a.dirs, Out: &b}); err != nil {
		t.Fatalf("last run: %v\n%s", err, b.String())
	}
	t.Logf("last run:\n%s", b.String())
	a.start(ctx)
	for w := range windows {
		a.produce(ctx, closers(8, int64(61+w)*minute), 8)
		a.flushOnceRunning(ctx)
	}
	got, want := a.panes(ctx, "w", windows*minute), expected(evs)
	if !slices.Equal(got, want) {
		t.Fatalf("%d panes, want %d; first differences:\n%s", len(got), len(want), diff(got, want))
	}
}

// TestMain runs the test binary as TestRescaleKilled's child when its
// environment names an app: a rescale to 8 of that app, which the parent
// kills midway. Otherwise it runs the tests.
func TestMain(m *testing.M) {
	if brokers := os.Getenv("RESCALE_CHILD_BROKERS"); brokers != "" {
		os.Exit(rescaleChild(brokers))
	}
	os.Exit(m.Run())
}

func rescaleChild(brokers string) int {
	k, err := kafkaio.New(&kafkaio.Conn{Brokers: strings.Split(brokers, ",")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer k.Close()
	_, err = rescale.Run(context.Background(), k, rescale.Options{AppID: os.Getenv("RESCALE_CHILD_APP"), To: 8,
		DataDirs: strings.Split(os.Getenv("RESCALE_CHILD_DIRS"), ","), Out: os.Stdout})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(childDone)
	return 0
}

// childDone is the child's last line when its rescale finished.
const childDone = "rescale child: finished"

// lockedBuilder is a strings.Builder safe to write and read at once.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRescaleEveryStateKind: SESSION, HOP and upsert (no window) state
// moves as TUMBLE's does. Each stream's output after a 4 -> 8 rescale
// equals a control app's, which ran the same rows on 4 partitions
// throughout: sessions and hopping windows open across the rescale, and
// every key's running totals, carry on.
func TestRescaleEveryStateKind(t *testing.T) {
	const from, to, span = 4, 8, 7 * minute
	evs := input(11, 300, 6000, span)
	half := len(evs) / 2
	queries := map[string]string{
		"sess": "SELECT k, ss, se, n, s FROM sess",
		"hop":  "SELECT k, ws, n, s FROM hop",
		// The closers differ by count (a key for each partition): only
		// the input's keys, k0..k299, are compared.
		"up": "SELECT k, MAX(n), MAX(s) FROM up WHERE k >= 'k' GROUP BY k",
	}
	run := func(rescaled bool) map[string][]string {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		a := newApp(t, 2)
		a.start(ctx)
		defer a.stop()
		a.exec(ctx, fmt.Sprintf(sourceSQL, a.topic, from),
			fmt.Sprintf(`CREATE STREAM sess WITH (topic = '%ssess') AS SELECT k, SESSION_START(ts, INTERVAL '30' SECOND) AS ss, SESSION_END(ts, INTERVAL '30' SECOND) AS se, COUNT(*) AS n, SUM(x) AS s FROM ev GROUP BY k, SESSION(ts, INTERVAL '30' SECOND)`, a.out),
			fmt.Sprintf(`CREATE STREAM hop WITH (topic = '%shop') AS SELECT k, HOP_START(ts, INTERVAL '30' SECOND, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n, SUM(x) AS s FROM ev GROUP BY k, HOP(ts, INTERVAL '30' SECOND, INTERVAL '1' MINUTE)`, a.out),
			fmt.Sprintf(`CREATE STREAM up WITH (topic = '%sup') AS SELECT k, COUNT(*) AS n, SUM(x) AS s FROM ev GROUP BY k`, a.out))
		a.produce(ctx, evs[:half], from)
		a.exec(ctx, "FLUSH")
		n := from
		if rescaled {
			a.stop()
			if err := a.k.CreatePartitions(ctx, a.topic, to); err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			sum, err := rescale.Run(ctx, a.k, rescale.Options{AppID: a.id, To: to, DataDirs: a.dirs, Out: &b})
			if err != nil {
				t.Fatalf("rescale: %v\n%s", err, b.String())
			}
			if len(sum.Streams) != 3 {
				t.Fatalf("summary %+v, want 3 streams\n%s", sum.Streams, b.String())
			}
			a.start(ctx)
			n = to
		}
		a.produce(ctx, evs[half:], n)
		a.produce(ctx, closers(n, span+10*minute), n)
		a.exec(ctx, "FLUSH")
		out := map[string][]string{}
		for name, q := range queries {
			out[name] = a.rows(ctx, q)
		}
		return out
	}
	want, got := run(false), run(true)
	for name := range queries {
		if len(want[name]) < 300 {
			t.Fatalf("%s: the control has %d rows: the test shows nothing", name, len(want[name]))
		}
		if !slices.Equal(got[name], want[name]) {
			t.Errorf("%s: %d rows after the rescale, %d in the control; first differences:\n%s", name, len(got[name]), len(want[name]), diff(got[name], want[name]))
		}
	}
}

// rows runs a query on the first node and returns its rows, each as its
// values joined by spaces, sorted.
func (a *app) rows(ctx context.Context, q string) []string {
	a.t.Helper()
	conn, err := pgx.Connect(ctx, "postgres://turbine@"+a.nodes[0].PGAddr()+"/turbine?sslmode=disable")
	if err != nil {
		a.t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, q)
	if err != nil {
		a.t.Fatalf("%s: %v", q, err)
	}
	var out []string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			a.t.Fatal(err)
		}
		out = append(out, strings.TrimSuffix(strings.TrimPrefix(fmt.Sprint(vals), "["), "]"))
	}
	if err := rows.Err(); err != nil {
		a.t.Fatal(err)
	}
	slices.Sort(out)
	return out
}
