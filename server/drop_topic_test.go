package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/turbinesql/turbinesql/kafkaio"
)

// brokerState is what a statement can leave behind: the broker's topics
// and the catalog topic's records.
type brokerState struct {
	topics  []string
	catalog int
}

func stateOf(ctx context.Context, t *testing.T, srv *Server) brokerState {
	t.Helper()
	topics, err := srv.kafka.TopicNames(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(topics)
	n := 0
	if err := srv.kafka.ReadAll(ctx, srv.clog.topic, func(*kafkaio.Record) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return brokerState{topics: topics, catalog: n}
}

// TestRefusedCreateStreamLeavesNothing: a CREATE STREAM refused for any
// reason (planning, a bad option, a combine or repartition hop's check, a
// partition count that does not divide 960, an output topic of another
// count) creates no topic and writes no catalog record. The hop checks
// used to run after the output topic was created (combine) or after the
// catalog record was written (repartition).
func TestRefusedCreateStreamLeavesNothing(t *testing.T) {
	parallel(t)
	ctx, srv, conn := testSession(t, 2*time.Minute)
	execAll(ctx, t, conn,
		`CREATE SOURCE rf (k TEXT, g TEXT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'rf', partitions = 4, partition_key = 'k')`,
		`CREATE SOURCE rf7 (k TEXT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'rf7', partitions = 7, partition_key = 'k')`,
		`CREATE STREAM rf_hop WITH (topic = 'rf_hop', strategy = 'repartition', repartition_partitions = 4) AS SELECT g, COUNT(*) AS n FROM rf GROUP BY g`,
		`CREATE STREAM rf_two WITH (topic = 'rf_two', partitions = 2) AS SELECT k, v FROM rf`,
		`DROP STREAM rf_two`,
	)
	win := `SELECT g, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM rf GROUP BY g, TUMBLE(ts, INTERVAL '1' MINUTE)`
	cases := []struct{ name, stmt, code string }{
		{"planning", `CREATE STREAM rf_x WITH (topic = 'rf_x1') AS SELECT nope FROM rf`, "42703"},
		{"bad option", `CREATE STREAM rf_x WITH (topic = 'rf_x2', processing_guarantee = 'twice') AS SELECT k FROM rf`, "22023"},
		{"combine with lateness", `CREATE STREAM rf_x WITH (topic = 'rf_x3', strategy = 'combine', allowed_lateness = INTERVAL '1' SECOND) AS ` + win, "0A000"},
		{"combine count not dividing 960", `CREATE STREAM rf_x WITH (topic = 'rf_x4', strategy = 'combine', combine_partitions = 7) AS ` + win, "22023"},
		{"combine count not a number", `CREATE STREAM rf_x WITH (topic = 'rf_x5', strategy = 'combine', combine_partitions = 'many') AS ` + win, "22023"},
		{"keyless combine on two partitions", `CREATE STREAM rf_x WITH (topic = 'rf_x6', combine_partitions = 2) AS SELECT TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM rf GROUP BY TUMBLE(ts, INTERVAL '1' MINUTE)`, "22023"},
		{"repartition count not dividing 960", `CREATE STREAM rf_x WITH (topic = 'rf_x7', strategy = 'repartition', repartition_partitions = 7, processing_guarantee = 'exactly_once') AS SELECT g, COUNT(*) AS n FROM rf GROUP BY g`, "22023"},
		{"shared hop of another count", `CREATE STREAM rf_x WITH (topic = 'rf_x8', strategy = 'repartition', repartition_partitions = 2) AS SELECT g, SUM(v) AS n FROM rf GROUP BY g`, "22023"},
		{"input count not dividing 960", `CREATE STREAM rf_x WITH (topic = 'rf_x9') AS SELECT k, COUNT(*) AS n FROM rf7 GROUP BY k`, "22023"},
		{"output topic of another count", `CREATE STREAM rf_x WITH (topic = 'rf_two', partitions = 4) AS SELECT k, v FROM rf`, "22023"},
		{"a source's topic", `CREATE STREAM rf_x WITH (topic = 'rf7') AS SELECT k, v FROM rf`, "55006"},
		{"another stream's topic", `CREATE STREAM rf_x WITH (topic = 'rf_hop') AS SELECT k, v FROM rf`, "55006"},
	}
	for _, c := range cases {
		before := stateOf(ctx, t, srv)
		_, err := conn.Exec(ctx, c.stmt)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != c.code {
			t.Errorf("%s: %v, want SQLSTATE %s", c.name, err, c.code)
			continue
		}
		after := stateOf(ctx, t, srv)
		if !slices.Equal(before.topics, after.topics) {
			t.Errorf("%s (%s): topics %v, were %v", c.name, pe.Message, after.topics, before.topics)
		}
		if after.catalog != before.catalog {
			t.Errorf("%s (%s): %d catalog records, were %d", c.name, pe.Message, after.catalog, before.catalog)
		}
	}
	rows, err := conn.Query(ctx, `SHOW STREAMS`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		if vals, err := rows.Values(); err != nil || vals[0] == "rf_x" {
			t.Errorf("SHOW STREAMS: %v %v", vals, err)
		}
	}
}

// TestCreateOverHeldTopicNotice: CREATE STREAM over a topic that holds
// records says so in a NOTICE naming the topic; over a fresh topic it
// says nothing. DROP ... DELETE TOPIC deletes the output topic and the
// stream's internal ones (combine topic, changelogs), and a stream created
// again under the name starts on an empty topic, without a NOTICE.
func TestCreateOverHeldTopicNotice(t *testing.T) {
	parallel(t)
	ctx, srv, _ := testSession(t, 2*time.Minute)
	c := connectNotices(ctx, t, srv)
	defer c.Close(ctx)
	execAll(ctx, t, c.Conn,
		`CREATE SOURCE hn (k TEXT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'hn', partitions = 2, partition_key = 'k')`,
		`INSERT INTO hn VALUES ('a', 1, TIMESTAMP '2026-01-01 00:00:01'), ('b', 2, TIMESTAMP '2026-01-01 00:00:02'), ('a', 3, TIMESTAMP '2026-01-01 00:01:30')`,
	)
	c.takeNotices()
	create := `CREATE STREAM hn_w WITH (topic = 'hn_out', strategy = 'combine') AS SELECT k, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM hn GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`
	execAll(ctx, t, c.Conn, create, `FLUSH`)
	if ns := c.takeNotices(); len(ns) != 0 {
		t.Fatalf("CREATE over a fresh topic: notices %v", ns[0].Message)
	}
	if got := keyCounts(ctx, t, c.Conn, `SELECT k, n FROM hn_w ORDER BY k`); got != "a=1 b=1" {
		t.Fatalf("first stream: %s", got)
	}
	execAll(ctx, t, c.Conn, `DROP STREAM hn_w`, create, `FLUSH`)
	ns := c.takeNotices()
	if len(ns) != 1 || !strings.Contains(ns[0].Message, `topic "hn_out" already holds 2 records`) || !strings.Contains(ns[0].Message, "hn_w") {
		var msgs []string
		for _, n := range ns {
			msgs = append(msgs, n.Message)
		}
		t.Fatalf("CREATE over a held topic: notices %q", msgs)
	}
	if got := keyCounts(ctx, t, c.Conn, `SELECT k, n FROM hn_w ORDER BY k`); got != "a=1 b=1" {
		t.Fatalf("stream created again: %s (the old stream's panes must not show)", got)
	}

	internal := []string{"hn_out", combineTopic(srv.cfg.AppID, "hn", "hn_w"), changelogTopic(srv.groupName("hn_w")), changelogTopic(combineTopic(srv.cfg.AppID, "hn", "hn_w"))}
	have := stateOf(ctx, t, srv).topics
	for _, topic := range internal {
		if !slices.Contains(have, topic) {
			t.Fatalf("topic %s missing before DROP (have %v)", topic, have)
		}
	}
	execAll(ctx, t, c.Conn, `DROP STREAM hn_w DELETE TOPIC`)
	if ns := c.takeNotices(); len(ns) != 1 || !strings.Contains(ns[0].Message, "deleted topics hn_out") {
		t.Fatalf("DROP ... DELETE TOPIC: notices %v", ns)
	}
	have = stateOf(ctx, t, srv).topics
	for _, topic := range internal {
		if slices.Contains(have, topic) {
			t.Errorf("topic %s still there after DROP ... DELETE TOPIC", topic)
		}
	}
	execAll(ctx, t, c.Conn, create, `FLUSH`)
	if ns := c.takeNotices(); len(ns) != 0 {
		t.Fatalf("CREATE after DELETE TOPIC: notice %q", ns[0].Message)
	}
	if got := keyCounts(ctx, t, c.Conn, `SELECT k, n FROM hn_w ORDER BY k`); got != "a=1 b=1" {
		t.Fatalf("stream created on a fresh topic: %s", got)
	}
}

// TestStreamDecodeErrorNamesStream: a record in a stream's output topic,
// past its start, that does not have the stream's columns (something else
// wrote it) fails a SELECT with an error whose hint names the stream, not
// a source of that name.
func TestStreamDecodeErrorNamesStream(t *testing.T) {
	parallel(t)
	ctx, srv, conn := testSession(t, time.Minute)
	execAll(ctx, t, conn,
		`CREATE SOURCE dn (k TEXT, v BIGINT) WITH (topic = 'dn', partitions = 1)`,
		`CREATE STREAM dn_s WITH (topic = 'dn_out') AS SELECT k, v FROM dn`,
		`INSERT INTO dn VALUES ('a', 1)`, `FLUSH`,
	)
	if err := srv.kafka.ProduceOne(ctx, &kafkaio.Record{Topic: "dn_out", Value: []byte(`{"k":"b","v":"not a number"}`)}); err != nil {
		t.Fatal(err)
	}
	_, err := conn.Exec(ctx, `SELECT k, v FROM dn_s`)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "22P02" {
		t.Fatalf("SELECT: %v, want 22P02", err)
	}
	if !strings.Contains(pe.Hint, `stream "dn_s"`) || strings.Contains(pe.Hint, "source") {
		t.Fatalf("hint %q does not name the stream", pe.Hint)
	}
}

// TestCatalogRecordStart: a stream's catalog record carries its output
// start in turbine.start, written and read back; a record without it (an
// existing deployment's catalog) loads and means the whole topic; one
// this release cannot parse is not applied (its object is marked failed)
// rather than read as "from the start".
func TestCatalogRecordStart(t *testing.T) {
	rec := func(hs ...kafkaio.Header) *kafkaio.Record {
		return &kafkaio.Record{Key: []byte("stream/s"), Value: []byte("CREATE STREAM s AS SELECT k FROM src"), Headers: hs, Offset: 3}
	}
	v2 := kafkaio.Header{Key: hdrCatalogV, Value: []byte("2")}
	old, ok, err := decodeCatalog(rec(v2, kafkaio.Header{Key: hdrOp, Value: []byte("create")}))
	if !ok || err != nil || old.Start != nil {
		t.Fatalf("record without a start: %+v %v %v", old.Start, ok, err)
	}
	if v1, ok, err := decodeCatalog(rec()); !ok || err != nil || v1.Start != nil {
		t.Fatalf("version-1 record: %+v %v %v", v1.Start, ok, err)
	}
	got, ok, err := decodeCatalog(rec(v2, kafkaio.Header{Key: hdrStart, Value: []byte("0:5,2:9")}))
	if !ok || err != nil || got.Start.At(0) != 5 || got.Start.At(1) != 0 || got.Start.At(2) != 9 {
		t.Fatalf("record with a start: %v %v %v", got.Start, ok, err)
	}
	if _, ok, err := decodeCatalog(rec(v2, kafkaio.Header{Key: hdrStart, Value: []byte("zero")})); !ok || err == nil {
		t.Fatalf("malformed start accepted: %v", err)
	}
}

// TestDropRecreateAcrossNodes: a stream running on two nodes (each
// writing its output through its own client) is dropped on one and
// created again under the name on the other. Without DELETE TOPIC the new
// stream starts where the topic ended, on both nodes (the start travels
// in its catalog record); with it, the topic is deleted once both nodes
// stopped the stream, and the new stream writes a new topic of the name
// from both nodes (neither takes it for the old one: UNKNOWN_TOPIC_ID).
func TestDropRecreateAcrossNodes(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, start := appNodes(t, 2, "droptopic")
	a := start(t.TempDir())
	defer func() { a.Close() }()
	b := start(t.TempDir())
	defer func() { b.Close() }()
	ca := connect(ctx, t, a)
	defer ca.Close(ctx)
	cb := connectNotices(ctx, t, b)
	defer cb.Close(ctx)

	execAll(ctx, t, ca,
		`CREATE SOURCE xe (k TEXT, v BIGINT) WITH (topic = 'xe', partitions = 2, partition_key = 'k')`,
		`INSERT INTO xe VALUES ('a', 1), ('b', 2), ('c', 3), ('d', 4)`,
		`CREATE STREAM xs WITH (topic = 'xs_out') AS SELECT k, v FROM xe`)
	waitOwned(t, "one partition of xs on each node", func() bool { return owned(a, "xs") == 1 && owned(b, "xs") == 1 })
	execAll(ctx, t, ca, `FLUSH`)
	if got := keyCounts(ctx, t, ca, `SELECT k, v FROM xs ORDER BY k`); got != "a=1 b=2 c=3 d=4" {
		t.Fatalf("first stream: %s", got)
	}

	for _, round := range []struct {
		drop string
		mult int
	}{{`DROP STREAM xs`, 10}, {`DROP STREAM xs DELETE TOPIC`, 100}} {
		execAll(ctx, t, ca, round.drop)
		cb.takeNotices()
		execAll(ctx, t, cb.Conn, `CREATE STREAM xs WITH (topic = 'xs_out') AS SELECT k, v * `+strconv.Itoa(round.mult)+` AS v FROM xe WHERE v > 1`)
		ns := cb.takeNotices()
		if held := len(ns) == 1 && strings.Contains(ns[0].Message, `topic "xs_out" already holds`); held == strings.Contains(round.drop, "DELETE") {
			t.Errorf("after %s: notices %v", round.drop, ns)
		}
		waitOwned(t, "one partition of xs on each node", func() bool { return owned(a, "xs") == 1 && owned(b, "xs") == 1 })
		execAll(ctx, t, cb.Conn, `INSERT INTO xe VALUES ('e', 5), ('f', 6)`, `FLUSH`)
		m := round.mult
		want := fmt.Sprintf("b=%d c=%d d=%d e=%d f=%d", 2*m, 3*m, 4*m, 5*m, 6*m)
		if round.mult == 100 {
			// e and f of the first round were read by that stream too.
			want = fmt.Sprintf("b=%d c=%d d=%d e=%d e=%d f=%d f=%d", 2*m, 3*m, 4*m, 5*m, 5*m, 6*m, 6*m)
		}
		for name, conn := range map[string]*pgx.Conn{"a": ca, "b": cb.Conn} {
			if got := keyCounts(ctx, t, conn, `SELECT k, v FROM xs ORDER BY k, v`); got != want {
				t.Errorf("after %s, SELECT on %s: %s, want %s", round.drop, name, got, want)
			}
		}
	}
}

// TestDeleteTopicKeepsSharedHop: DROP STREAM ... DELETE TOPIC deletes a
// repartition hop's topic only with the last stream reading it; the other
// stream keeps running on it.
func TestDeleteTopicKeepsSharedHop(t *testing.T) {
	parallel(t)
	ctx, srv, conn := testSession(t, 2*time.Minute)
	execAll(ctx, t, conn,
		`CREATE SOURCE sh (k TEXT, g TEXT, v BIGINT) WITH (topic = 'sh', partitions = 2, partition_key = 'k')`,
		`CREATE STREAM sh_n WITH (topic = 'sh_n', strategy = 'repartition') AS SELECT g, COUNT(*) AS n FROM sh GROUP BY g`,
		`CREATE STREAM sh_s WITH (topic = 'sh_s', strategy = 'repartition') AS SELECT g, SUM(v) AS n FROM sh GROUP BY g`,
		`INSERT INTO sh VALUES ('a', 'x', 1), ('b', 'x', 2), ('c', 'y', 3)`, `FLUSH`,
	)
	srv.mu.Lock()
	hop := srv.hopTopic(nil, srv.streams["sh_n"].plan)
	shared := srv.streams["sh_s"].hop != nil && srv.streams["sh_s"].hop.topic == hop
	srv.mu.Unlock()
	if !shared {
		t.Fatalf("the streams do not share hop %s", hop)
	}
	execAll(ctx, t, conn, `DROP STREAM sh_n DELETE TOPIC`)
	have := stateOf(ctx, t, srv).topics
	if slices.Contains(have, "sh_n") || !slices.Contains(have, hop) || !slices.Contains(have, "sh_s") {
		t.Fatalf("after dropping one reader of the hop: topics %v", have)
	}
	execAll(ctx, t, conn, `INSERT INTO sh VALUES ('d', 'y', 4)`, `FLUSH`)
	if got := keyCounts(ctx, t, conn, `SELECT g, n FROM sh_s ORDER BY g`); got != "x=3 y=7" {
		t.Fatalf("the other reader of the hop: %s", got)
	}
	execAll(ctx, t, conn, `DROP STREAM sh_s DELETE TOPIC`)
	have = stateOf(ctx, t, srv).topics
	for _, topic := range []string{"sh_s", hop, changelogTopic(hop), changelogTopic(srv.groupName("sh_s"))} {
		if slices.Contains(have, topic) {
			t.Errorf("topic %s still there after its last reader's DROP ... DELETE TOPIC", topic)
		}
	}
	if !slices.Contains(have, "sh") {
		t.Errorf("the source's topic went: %v", have)
	}
}
