package server

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/state"
)

// TestDeadLettersOfMixedBatches: a source with on_error = 'dlq' is fed
// batches that each hold an undecodable record, a row without an event
// time and a row with a field of the wrong type, in every order, between
// good rows. Streams of every plan read it (two local ones, a repartition
// hop, a combine hop, a keyless window, a stateless copy), under each
// delivery guarantee, across a restart, and streams created after the
// restart read it all again from the start. The dead-letter topic
// (read_committed) holds each bad record exactly once, as it was; SHOW
// STREAMS counts, per stream, the records it did not use because they are
// there.
func TestDeadLettersOfMixedBatches(t *testing.T) {
	parallel(t)
	for _, g := range []string{"at_least_once", "exactly_once"} {
		t.Run(g, func(t *testing.T) { testDeadLettersOfMixedBatches(t, g) })
	}
}

// badRows are the three kinds of bad record, by name: each value is
// formatted with a number that makes it unique.
var badRows = map[string]string{
	"undecodable": `{"k": "%s", "u": "u1", "v": %d, "ts": "2026-01-01T00:00:0`,
	"no_time":     `{"k": "%s", "u": "u2", "v": %d, "ts": null}`,
	"wrong_type":  `{"k": "%s", "u": "u3", "v": "seven-%d", "ts": "2026-01-01T00:00:03Z"}`,
}

func testDeadLettersOfMixedBatches(t *testing.T, guarantee string) {
	if testBrokers() != "" {
		isolateTopics(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	srv := startTestServer(t, dir)
	defer func() { srv.Close() }()
	conn := connect(ctx, t, srv)
	with := fmt.Sprintf("processing_guarantee = '%s'", guarantee)
	execAll(ctx, t, conn,
		`CREATE SOURCE ev (k TEXT, u TEXT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 2, partition_key = 'k', on_error = 'dlq', dlq_topic = 'ev_dlq')`,
		`CREATE STREAM loc WITH (`+with+`) AS SELECT k, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`,
		`CREATE STREAM loc2 WITH (`+with+`) AS SELECT k, SUM(v) AS s FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`,
		`CREATE STREAM rep WITH (`+with+`, strategy = 'repartition') AS SELECT u, COUNT(*) AS n FROM ev GROUP BY u, TUMBLE(ts, INTERVAL '1' MINUTE)`,
		`CREATE STREAM cmb WITH (`+with+`, strategy = 'combine') AS SELECT u, COUNT(*) AS n FROM ev GROUP BY u, TUMBLE(ts, INTERVAL '1' MINUTE)`,
		`CREATE STREAM keyless WITH (`+with+`) AS SELECT TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM ev GROUP BY TUMBLE(ts, INTERVAL '1' MINUTE)`,
		`CREATE STREAM copy WITH (`+with+`) AS SELECT k, v FROM ev`,
	)
	// key[p] is placed on partition p by murmur2, as INSERT places it.
	var key [2]string
	for i := 0; key[0] == "" || key[1] == ""; i++ {
		k := "key" + strconv.Itoa(i)
		if p := state.PartitionFor([]byte(k), 2); key[p] == "" {
			key[p] = k
		}
	}
	want := map[string]string{} // "partition/offset" of each bad record → its value
	n := 0
	// round writes one batch per order of the three kinds, on the two
	// partitions in turn, and FLUSHes.
	round := func(conn *pgx.Conn, srv *Server) {
		t.Helper()
		for i, order := range [][]string{
			{"undecodable", "no_time", "wrong_type"}, {"undecodable", "wrong_type", "no_time"},
			{"no_time", "undecodable", "wrong_type"}, {"no_time", "wrong_type", "undecodable"},
			{"wrong_type", "undecodable", "no_time"}, {"wrong_type", "no_time", "undecodable"},
		} {
			p := int32(i % 2)
			good := func() *kgo.Record {
				n++
				return &kgo.Record{Topic: "ev", Partition: p, Key: []byte(key[p]),
					Value: fmt.Appendf(nil, `{"k": %q, "u": "u%d", "v": %d, "ts": "2026-01-01T00:00:%02dZ"}`, key[p], n%3, n, n%50)}
			}
			recs := []*kgo.Record{good()}
			var bad []*kgo.Record
			for _, kind := range order {
				n++
				r := &kgo.Record{Topic: "ev", Partition: p, Key: []byte(key[p]), Value: fmt.Appendf(nil, badRows[kind], key[p], n)}
				recs, bad = append(recs, r, good()), append(bad, r)
			}
			if err := srv.kafka.ProduceSync(ctx, recs); err != nil {
				t.Fatal(err)
			}
			for _, r := range bad {
				want[fmt.Sprintf("%d/%d", r.Partition, r.Offset)] = string(r.Value)
			}
		}
		execAll(ctx, t, conn, "FLUSH")
	}
	round(conn, srv)
	// Each windowed stream used none of the 18 bad records; the stateless
	// copy used the 6 rows without an event time.
	for name, dead := range map[string]int64{"loc": 18, "loc2": 18, "rep": 18, "cmb": 18, "keyless": 18, "copy": 12} {
		row := showRow(ctx, t, conn, name)
		if row[4] != "running" || row[9] != dead {
			t.Errorf("SHOW STREAMS %s: status %v, dead_lettered %v, want running with %d (%v)", name, row[4], row[9], dead, row)
		}
	}
	auditDeadLetters(ctx, t, srv, want)

	conn.Close(ctx)
	srv.Close()
	srv = startTestServer(t, dir)
	conn = connect(ctx, t, srv)
	defer conn.Close(ctx)
	round(conn, srv)
	// Streams created now read the source from its start, a new hop too:
	// what is in the dead-letter topic already is not written again.
	execAll(ctx, t, conn,
		`CREATE STREAM late_loc WITH (`+with+`) AS SELECT k, MAX(v) AS m FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`,
		`CREATE STREAM late_rep WITH (`+with+`, strategy = 'repartition') AS SELECT v, COUNT(*) AS n FROM ev GROUP BY v, TUMBLE(ts, INTERVAL '1' MINUTE)`,
		"FLUSH")
	for _, name := range []string{"late_loc", "late_rep"} {
		if row := showRow(ctx, t, conn, name); row[4] != "running" || row[9] != int64(36) {
			t.Errorf("SHOW STREAMS %s: status %v, dead_lettered %v, want running with 36 (%v)", name, row[4], row[9], row)
		}
	}
	auditDeadLetters(ctx, t, srv, want)
}

// auditDeadLetters reads the dead-letter topic ev_dlq read_committed and
// checks it holds each record of want (by source "partition/offset")
// exactly once, with its value as written, and nothing else.
func auditDeadLetters(ctx context.Context, t *testing.T, srv *Server, want map[string]string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(srv.KafkaAddrs()...), kgo.ConsumeTopics("ev_dlq"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[string]int{}
	var problems []string
	deadline := time.Now().Add(3 * time.Second) // every fetch back
	for time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			h := map[string]string{}
			for _, x := range r.Headers {
				h[x.Key] = string(x.Value)
			}
			at := h["turbine.source.partition"] + "/" + h["turbine.source.offset"]
			got[at]++
			if v, ok := want[at]; !ok || v != string(r.Value) || h["turbine.source.topic"] != "ev" || h["turbine.source"] != "ev" {
				problems = append(problems, fmt.Sprintf("%s %q (headers %v), want %q", at, r.Value, h, v))
			}
		})
	}
	for at := range want {
		if got[at] != 1 {
			problems = append(problems, fmt.Sprintf("%s is there %d times", at, got[at]))
		}
	}
	if len(problems) > 0 {
		t.Fatalf("dead-letter topic, %d bad records written: %s", len(want), strings.Join(problems, "; "))
	}
}
