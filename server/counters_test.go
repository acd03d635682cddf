package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/state"
)

// counterStreams are a stream of every plan (local, repartition, combine,
// keyless combine, stateless) under both guarantees, over source ev.
func counterStreams() (ddl []string, windowed map[string]bool) {
	windowed = map[string]bool{}
	plans := []struct{ name, with, body string }{
		{"loc", "", "SELECT k, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)"},
		{"rep", ", strategy = 'repartition'", "SELECT u, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM ev GROUP BY u, TUMBLE(ts, INTERVAL '1' MINUTE)"},
		{"cmb", ", strategy = 'combine'", "SELECT u, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM ev GROUP BY u, TUMBLE(ts, INTERVAL '1' MINUTE)"},
		{"kls", "", "SELECT TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n, SUM(v) AS total FROM ev GROUP BY TUMBLE(ts, INTERVAL '1' MINUTE)"},
		{"sel", "", "SELECT k, u, v FROM ev"},
	}
	for g, suffix := range map[string]string{"at_least_once": "alo", "exactly_once": "eos"} {
		for _, p := range plans {
			name := p.name + "_" + suffix
			windowed[name] = p.name != "sel"
			ddl = append(ddl, fmt.Sprintf("CREATE STREAM %s WITH (topic = '%s', processing_guarantee = '%s'%s) AS %s", name, name, g, p.with, p.body))
		}
	}
	return ddl, windowed
}

// counterInput makes ev's records and counts them independently of the
// engine: every record is read (records_in); an undecodable one is
// dead-lettered by every stream, one without an event time by the
// windowed ones (the stateless ones pass it on); a row whose windows
// closed everywhere is late for the windowed ones.
type counterInput struct {
	recs                          []*kgo.Record
	in, undecodable, noTime, late int64
	v                             int64 // the next row's v: every row is distinct
}

func (ci *counterInput) row(k, u string, at string) {
	ci.v++
	val := fmt.Sprintf(`{"k":%q,"u":%q,"v":%d,"ts":"2026-01-01T%sZ"}`, k, u, ci.v, at)
	ci.add(k, val)
}

func (ci *counterInput) lateRow(k, u, at string) { ci.row(k, u, at); ci.late++ }

func (ci *counterInput) undecodableRow(k string) {
	ci.add(k, `{"k": "`+k+`", "u": `)
	ci.undecodable++
}

func (ci *counterInput) noTimeRow(k, u string) {
	ci.v++
	ci.add(k, fmt.Sprintf(`{"k":%q,"u":%q,"v":%d}`, k, u, ci.v))
	ci.noTime++
}

func (ci *counterInput) add(k, val string) {
	ci.recs = append(ci.recs, &kgo.Record{Topic: "ev", Key: []byte(k), Value: []byte(val), Partition: state.PartitionFor([]byte(k), 2)})
	ci.in++
}

// send produces the records made since the last send.
func (ci *counterInput) send(ctx context.Context, t *testing.T, kc *kafkaio.Client) {
	t.Helper()
	if err := kc.ProduceSync(ctx, ci.recs); err != nil {
		t.Fatal(err)
	}
	ci.recs = nil
}

// want is what SHOW STREAMS must say of a stream, but for records_out.
func (ci *counterInput) want(windowed bool) dataflow.Counters {
	if windowed {
		return dataflow.Counters{In: ci.in, Late: ci.late, DLQ: ci.undecodable + ci.noTime}
	}
	return dataflow.Counters{In: ci.in, DLQ: ci.undecodable}
}

// showCounters is SHOW STREAMS's counters by stream.
func showCounters(ctx context.Context, t *testing.T, conn *pgx.Conn) map[string]dataflow.Counters {
	t.Helper()
	rows, err := conn.Query(ctx, "SHOW STREAMS")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]dataflow.Counters{}
	for rows.Next() {
		v, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		out[v[0].(string)] = dataflow.Counters{In: v[5].(int64), Out: v[6].(int64), Late: v[7].(int64), Skipped: v[8].(int64), DLQ: v[9].(int64)}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// outputRecords counts the distinct records of a stream's output topic
// that read_committed readers see: an at-least-once stream may write a
// record again after a crash (the same key and value), and counts it once,
// as its commit did.
func outputRecords(ctx context.Context, t *testing.T, kc *kafkaio.Client, topic string) int64 {
	t.Helper()
	seen := map[string]bool{}
	if err := kc.ReadAll(ctx, topic, func(r *kgo.Record) error {
		seen[string(r.Key)+"\x00"+string(r.Value)] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return int64(len(seen))
}

// TestCountersSurviveRestartsAndCrashes runs a stream of every plan under
// both guarantees and checks SHOW STREAMS's records_in, records_out,
// late_rows, skipped and dead_lettered against an independent count of
// the input (and of the output topics) after a first input, after a
// SIGKILL of the process with input counted but not committed, after a
// clean restart (unchanged, before anything new is read) and after more
// input: a restart neither resets a counter nor counts anything twice,
// and a combine does not count again the input it reads again after a
// restart (its unshipped windows').
func TestCountersSurviveRestartsAndCrashes(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	conn0 := kafkaio.Conn{}
	app := "counters"
	if b := testBrokers(); b != "" {
		isolateTopics(t)
		conn0, app = testKafkaConn(), sharedAppID(t)
	} else {
		b := brokerAt(t, freeAddr(t), t.TempDir())
		t.Cleanup(b.Close)
		conn0.Brokers = b.ListenAddrs()
	}
	kc, err := kafkaio.New(&conn0)
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	dir := t.TempDir()
	onBroker := func(c *Config) { c.Brokers, c.Kafka, c.AppID = conn0.Brokers, conn0, app }

	ddl, windowed := counterStreams()
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"}
	parts := map[int32]bool{}
	for _, k := range keys {
		parts[state.PartitionFor([]byte(k), 2)] = true
	}
	if len(parts) != 2 {
		t.Fatalf("keys %v all on one partition: the late rows need both partitions' watermarks past them", keys)
	}
	user := func(i int) string { return fmt.Sprintf("u%d", i%4) }

	// check compares SHOW STREAMS with the input's count and the output
	// topics, and returns what it showed.
	var in counterInput
	check := func(conn *pgx.Conn, when string) map[string]dataflow.Counters {
		t.Helper()
		got := showCounters(ctx, t, conn)
		for name, w := range windowed {
			want := in.want(w)
			want.Out = outputRecords(ctx, t, kc, name)
			if got[name] != want {
				t.Errorf("%s: SHOW STREAMS counts %s %+v, want %+v", when, name, got[name], want)
			}
		}
		return got
	}

	// A process that will be SIGKILLed, committing only when a FLUSH or
	// the watermark makes it.
	child := startChild(t, childConfig{DataDir: dir, Brokers: conn0.Brokers, Kafka: conn0, AppID: app, CommitInterval: time.Hour})
	conn, err := pgx.Connect(ctx, "postgres://turbine@"+child.pgAddr+"/turbine?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	execAll(ctx, t, conn, append([]string{`CREATE SOURCE ev (k TEXT, u TEXT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev',
		partitions = 2, partition_key = 'k', on_error = 'dlq', idle_timeout = INTERVAL '120' SECOND)`}, ddl...)...)

	// The first minute, then a row of every key at 00:05 (every
	// partition's watermark passes the first minute), and bad records.
	// Every first-minute row precedes every 00:05 row in its partition: a
	// stream may read the records in more than one fetch, and a row after
	// its partition's 00:05 row would then be late (the watermark is
	// ts), not because of anything the engine did wrong.
	for i, k := range keys {
		for s := range 3 {
			in.row(k, user(i+s), fmt.Sprintf("00:00:%02d", 10*s+i))
		}
	}
	for i, k := range keys {
		in.row(k, user(i), "00:05:00")
	}
	in.undecodableRow("k0")
	in.noTimeRow("k1", "u1")
	in.undecodableRow("k2")
	in.noTimeRow("k3", "u3")
	in.send(ctx, t, kc)
	execAll(ctx, t, conn, "FLUSH")
	check(conn, "after the first input")

	// More input into the open window, counted but not committed (the
	// commit interval is an hour, and nothing moves the watermark), then
	// the process is killed.
	for i, k := range keys {
		in.row(k, user(i+1), "00:05:00")
	}
	in.undecodableRow("k4")
	in.noTimeRow("k5", "u1")
	in.send(ctx, t, kc)
	waitFor(t, 30*time.Second, "every stream to count the input before the kill", func() bool {
		got := showCounters(ctx, t, conn)
		for name := range windowed {
			if got[name].In != in.in {
				return false
			}
		}
		return true
	})
	conn.Close(ctx)
	child.kill(t)

	// After the crash: what was counted but not committed is read, and
	// counted, once more.
	srv := startTestServer(t, dir, onBroker)
	defer func() { srv.Close() }()
	conn = connect(ctx, t, srv)
	execAll(ctx, t, conn, "FLUSH")
	before := check(conn, "after a SIGKILL")
	conn.Close(ctx)

	// A clean restart changes nothing, before anything is read.
	srv.Close()
	srv = startTestServer(t, dir, onBroker)
	conn = connect(ctx, t, srv)
	defer conn.Close(ctx)
	if got := showCounters(ctx, t, conn); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("a clean restart changed the counts:\n got %v\nwant %v", got, before)
	}
	execAll(ctx, t, conn, "FLUSH")
	check(conn, "after a clean restart")

	// Late rows for every windowed stream, and a later minute that closes
	// the one at 00:05.
	in.lateRow("k0", "u0", "00:00:30")
	in.lateRow("k1", "u2", "00:00:31")
	in.lateRow("k6", "u3", "00:00:32")
	for i, k := range keys {
		in.row(k, user(i), "00:10:00")
	}
	in.undecodableRow("k7")
	in.send(ctx, t, kc)
	execAll(ctx, t, conn, "FLUSH")
	got := check(conn, "after more input")
	for name, w := range windowed {
		if w && got[name].Out == 0 {
			t.Errorf("%s wrote nothing: the test closes no window", name)
		}
	}
	t.Logf("counts: %v", strings.ReplaceAll(fmt.Sprint(got), "} ", "}\n"))
}

// TestCounterSeriesExistFromCreate: right after CREATE STREAM, before any
// input, every counter series a stream (and its hop) can count into is
// exported at 0, per partition where it is labelled so: a dashboard sees
// them from the start, not from the first event.
func TestCounterSeriesExistFromCreate(t *testing.T) {
	parallel(t)
	ctx, srv, conn := testSession(t, 90*time.Second)
	execAll(ctx, t, conn, `CREATE SOURCE ev (k TEXT, u TEXT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev',
		partitions = 2, partition_key = 'k', on_error = 'dlq')`)
	perPartition := func(series, stream string) []string {
		return []string{fmt.Sprintf("%s{partition=0,stream=%s}", series, stream), fmt.Sprintf("%s{partition=1,stream=%s}", series, stream)}
	}
	windowed := func(name string) []string {
		return append(perPartition("turbine_records_in_total", name),
			"turbine_records_out_total{stream="+name+"}",
			"turbine_decode_errors_total{policy=dlq,stream="+name+"}",
			"turbine_null_event_time_total{policy=dlq,stream="+name+"}",
			"turbine_late_rows_total{action=dropped,stream="+name+"}",
			"turbine_recovered_due_timers_total{stream="+name+"}")
	}
	for _, c := range []struct {
		stmt string
		want func() []string
	}{
		{"CREATE STREAM loc AS SELECT k, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)", func() []string { return windowed("loc") }},
		{"CREATE STREAM routed WITH (late_data_topic = 'late') AS SELECT k, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)", func() []string {
			return []string{"turbine_late_rows_total{action=routed,stream=routed}"}
		}},
		{"CREATE STREAM rep WITH (strategy = 'repartition') AS SELECT u, COUNT(*) AS n FROM ev GROUP BY u, TUMBLE(ts, INTERVAL '1' MINUTE)", func() []string {
			srv.mu.Lock()
			hop := srv.streams["rep"].hop.topic
			srv.mu.Unlock()
			return append(append(windowed("rep"), perPartition("turbine_records_in_total", hop)...),
				"turbine_decode_errors_total{policy=dlq,stream="+hop+"}",
				"turbine_repartition_null_keys_total{hop="+hop+"}")
		}},
		{"CREATE STREAM cmb WITH (strategy = 'combine') AS SELECT u, COUNT(*) AS n FROM ev GROUP BY u, TUMBLE(ts, INTERVAL '1' MINUTE)", func() []string {
			return append(windowed("cmb"), "turbine_combine_late_partials_total{stream=cmb}")
		}},
		{"CREATE STREAM sel AS SELECT k, v FROM ev", func() []string {
			return append(perPartition("turbine_records_in_total", "sel"), "turbine_records_out_total{stream=sel}", "turbine_decode_errors_total{policy=dlq,stream=sel}")
		}},
		{"CREATE STREAM ttl WITH (state_ttl = INTERVAL '1' HOUR) AS SELECT k, COUNT(*) AS n FROM ev GROUP BY k", func() []string {
			return append(perPartition("turbine_records_in_total", "ttl"), "turbine_expired_groups_total{stream=ttl}")
		}},
	} {
		execAll(ctx, t, conn, c.stmt)
		got := gathered(t, srv)
		for _, series := range c.want() {
			if v, ok := got[series]; !ok || v != 0 {
				t.Errorf("after %.40s...: %s = %v (exported: %v), want it exported at 0", c.stmt, series, v, ok)
			}
		}
	}
}
