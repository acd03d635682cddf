package server

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestFlushRoundsEndWhenInputsStop: FLUSH repeats its round (every
// stage reads its input to the end, then closes) only while a topic the
// stages read first moved: a stream reading another stream's output
// needs the second round, nothing needs a third. The internal topics
// behind hops move at every exactly-once commit (watermark and
// transaction markers); counting them as input made every FLUSH run its
// 20 rounds. Commits are only FLUSH's (a commit interval of minutes), so
// the chained stream's counts and the repartitioned stream's panes are
// there right after one FLUSH only if its rounds ran in order.
func TestFlushRoundsEndWhenInputsStop(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	addr, start := appNodes(t, 4, "rounds", func(c *Config) { c.CommitInterval = 10 * time.Minute })
	srv := start(t.TempDir())
	defer srv.Close()
	conn := connect(ctx, t, srv)
	defer conn.Close(ctx)
	execAll(ctx, t, conn,
		`CREATE SOURCE ev (k TEXT, u TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 4, partition_key = 'k')`,
		`CREATE STREAM byu WITH (processing_guarantee = 'exactly_once', strategy = 'repartition') AS
			SELECT u, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM ev GROUP BY u, TUMBLE(ts, INTERVAL '1' MINUTE)`,
		`CREATE STREAM copy WITH (topic = 'copy', message_key = 'k', processing_guarantee = 'exactly_once') AS SELECT k, u, ts FROM ev`,
		// An upsert count: rows of several keys share a partition of copy
		// in no order of time, so a window there could drop some as late.
		`CREATE STREAM byk WITH (processing_guarantee = 'exactly_once') AS SELECT k, COUNT(*) AS n FROM copy GROUP BY k`)

	prod, err := kgo.NewClient(kgo.SeedBrokers(addr...), kgo.DefaultProduceTopic("ev"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var recs []*kgo.Record
	want := map[string]map[string]bool{"byu": {}, "byk": {}}
	for p := range 4 {
		for i := range 3 {
			u := fmt.Sprintf("u%d", i)
			for j := 0; j <= i; j++ {
				recs = append(recs, &kgo.Record{Partition: int32(p), Key: []byte(fmt.Sprintf("k%d", p)),
					Value: []byte(fmt.Sprintf(`{"k":"k%d","u":%q,"ts":"2026-01-01T00:00:%02dZ"}`, p, u, 10+j))})
			}
		}
		want["byk"][fmt.Sprintf(`{"k":"k%d","n":7}`, p)] = true
		// Every partition moves on to 00:02, so [00:00, 00:01) closes.
		recs = append(recs, &kgo.Record{Partition: int32(p), Key: []byte(fmt.Sprintf("k%d", p)),
			Value: []byte(fmt.Sprintf(`{"k":"k%d","u":"late","ts":"2026-01-01T00:02:00Z"}`, p))})
	}
	for i := range 3 {
		want["byu"][fmt.Sprintf(`{"u":"u%d","ws":"2026-01-01T00:00:00Z","n":%d}`, i, 4*(i+1))] = true
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	before := testutil.ToFloat64(srv.flushRounds)
	execAll(ctx, t, conn, "FLUSH")
	if rounds := testutil.ToFloat64(srv.flushRounds) - before; rounds != 2 {
		t.Errorf("FLUSH over a chained stream ran %v rounds, want 2 (the second for the chained stream's input)", rounds)
	}
	for stream, w := range want {
		got := readOutput(ctx, t, addr, stream, true)
		sort.Strings(got)
		if len(got) != len(w) {
			t.Errorf("%s after one FLUSH: %v, want %d panes", stream, got, len(w))
		}
		for _, v := range got {
			if !w[v] {
				t.Errorf("%s: unexpected pane %s", stream, v)
			}
		}
	}

	before = testutil.ToFloat64(srv.flushRounds)
	execAll(ctx, t, conn, "FLUSH")
	if rounds := testutil.ToFloat64(srv.flushRounds) - before; rounds != 1 {
		t.Errorf("FLUSH with no new input ran %v rounds, want 1", rounds)
	}
}
