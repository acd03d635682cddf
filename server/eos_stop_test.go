package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestExactlyOnceCleanStops: exactly-once TUMBLE streams of each plan
// (local, repartition, combine) are stopped cleanly (Close, as SIGTERM
// does) ten times while input keeps arriving; at the end every window's
// pane is there once, with the count the input gives. It failed before
// commits ran to their end across a stop: a commit cut off by the stop
// left the operators' memory ahead of the state, and the final commit
// then wrote a close without the deletions that went with it, so a window
// came back at the next start with part of its rows.
func TestExactlyOnceCleanStops(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "ev"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	addr := cluster.ListenAddrs()
	dir := t.TempDir()
	start := func() *Server {
		return startTestServer(t, dir, func(c *Config) { c.Brokers = addr; c.AppID = "stops"; c.CommitInterval = 50 * time.Millisecond })
	}
	srv := start()
	conn := connect(ctx, t, srv)
	execAll(ctx, t, conn,
		`CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 3, partition_key = 'k')`,
		`CREATE STREAM w WITH (processing_guarantee = 'exactly_once') AS
			SELECT k, TUMBLE_START(ts, INTERVAL '1' SECOND) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' SECOND)`,
		`CREATE STREAM wr WITH (processing_guarantee = 'exactly_once', strategy = 'repartition') AS
			SELECT k, TUMBLE_START(ts, INTERVAL '1' SECOND) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' SECOND)`,
		`CREATE STREAM wc WITH (processing_guarantee = 'exactly_once', strategy = 'combine') AS
			SELECT k, TUMBLE_START(ts, INTERVAL '1' SECOND) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' SECOND)`)
	conn.Close(ctx)
	rng := rand.New(rand.NewPCG(1, 2))
	prng := rand.New(rand.NewPCG(3, 4))
	in := startPaneInput(ctx, t, addr, 7, 40, func(int) string { return fmt.Sprintf("k%d", prng.IntN(6)) })
	for round := 0; round < 10; round++ {
		time.Sleep(time.Duration(200+rng.IntN(600)) * time.Millisecond)
		srv.Close()
		srv = start()
	}
	want := in.stop(ctx, t, 3)
	defer srv.Close()
	conn = connect(ctx, t, srv)
	defer conn.Close(ctx)
	execAll(ctx, t, conn, "FLUSH")
	for _, out := range []string{"w", "wr", "wc"} {
		checkSecondPanes(ctx, t, addr, out, want, false)
	}
}

// paneInput writes rows {"k","ts"} to topic ev from outside, step ms of
// event time apart from 2026-01-01, batch rows every 10 ms, and counts
// the rows of each key in each one-second window ("k hh:mm:ss").
type paneInput struct {
	prod          *kgo.Client
	want          map[string]int
	halt, stopped chan struct{}
}

func startPaneInput(ctx context.Context, t *testing.T, addr []string, step int64, batch int, key func(i int) string) *paneInput {
	t.Helper()
	prod, err := kgo.NewClient(kgo.SeedBrokers(addr...), kgo.DefaultProduceTopic("ev"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	in := &paneInput{prod: prod, want: map[string]int{}, halt: make(chan struct{}), stopped: make(chan struct{})}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	go func() {
		defer close(in.stopped)
		for i, ms := 0, int64(0); ; {
			select {
			case <-in.halt:
				return
			default:
			}
			for j := 0; j < batch; j++ {
				k := key(i)
				i++
				ms += step
				ts := base.Add(time.Duration(ms) * time.Millisecond)
				in.want[fmt.Sprintf("%s %s", k, ts.Truncate(time.Second).Format("15:04:05"))]++
				prod.Produce(ctx, &kgo.Record{Key: []byte(k), Value: []byte(fmt.Sprintf(`{"k":%q,"ts":%q}`, k, ts.Format(time.RFC3339Nano)))}, nil)
			}
			if err := prod.Flush(ctx); err != nil {
				panic(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return in
}

// stop ends the input, closes every window with a last row far ahead on
// each of parts partitions, and returns the counts written.
func (in *paneInput) stop(ctx context.Context, t *testing.T, parts int) map[string]int {
	t.Helper()
	close(in.halt)
	<-in.stopped
	for p := 0; p < parts; p++ {
		in.prod.Produce(ctx, &kgo.Record{Partition: int32(p), Key: []byte(fmt.Sprintf("end%d", p)), Value: []byte(`{"k":"end","ts":"2026-01-01T01:00:00Z"}`)}, nil)
	}
	if err := in.prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return in.want
}

// checkSecondPanes reads topic out read_committed, panes of
// {"k","ws","n"} per one-second window, and checks each key's pane in
// each window against want ("k hh:mm:ss" -> n): every one there with its
// count, no other, and none written twice (with copies, at-least-once: a
// second copy must carry the same count). Rows of key "end" close the
// windows and are not counted.
func checkSecondPanes(ctx context.Context, t *testing.T, addr []string, out string, want map[string]int, copies bool) {
	t.Helper()
	got := map[string]int{}
	for _, v := range readOutput(ctx, t, addr, out, true) {
		var k, ws string
		var n int
		if _, err := fmt.Sscanf(v, `{"k":%q,"ws":%q,"n":%d}`, &k, &ws, &n); err != nil {
			t.Fatalf("pane %s: %v", v, err)
		}
		if k == "end" {
			continue
		}
		id := k + " " + ws[11:19]
		if prev, dup := got[id]; dup && (!copies || prev != n) {
			t.Errorf("%s: pane %s written twice (n=%d, then n=%d)", out, id, prev, n)
		}
		got[id] = n
	}
	bad := 0
	for id, n := range want {
		if got[id] != n && bad < 5 {
			bad++
			t.Errorf("%s: %s: n=%d, want %d", out, id, got[id], n)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%s: %d panes, want %d", out, len(got), len(want))
	}
}
