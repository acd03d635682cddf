package server

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/turbinesql/turbinesql/streamplan"
)

// TestHopUpgradesToExactlyOnce: the first exactly-once stream behind a
// running at-least-once repartition hop restarts the hop exactly-once
// (upgradeHop). Before, the hop's copies are visible to a read_committed
// reader as soon as they are written; after, they ride the hop's
// transactions: with a long commit interval (and rows that do not move the
// watermark, which would commit) a read_uncommitted reader of the hop
// topic sees new copies that a read_committed one does not. The hop's
// transactional id is then opened elsewhere (a zombie fencing it), which
// aborts the open transaction; the hop starts again and writes those
// copies once more, committed. A read_committed reader sees each copy
// once, none of the aborted transaction; and both streams, the one that
// ran across the upgrade and the exactly-once one, count every row once.
func TestHopUpgradesToExactlyOnce(t *testing.T) {
	parallel(t)
	if testBrokers() != "" {
		isolateTopics(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	srv := startTestServer(t, t.TempDir(), func(c *Config) { c.CommitInterval = time.Minute })
	defer srv.Close()
	conn := connect(ctx, t, srv)
	defer conn.Close(ctx)
	const perU = `SELECT u, TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n FROM ev GROUP BY u, TUMBLE(ts, INTERVAL '10' SECOND)`
	execAll(ctx, t, conn,
		`CREATE SOURCE ev (k TEXT, u TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 1, partition_key = 'k', idle_timeout = INTERVAL '1' HOUR)`,
		`CREATE STREAM alo WITH (strategy = 'repartition') AS `+perU,
		`INSERT INTO ev VALUES ('a', 'x', TIMESTAMP '2026-01-01 00:00:01'), ('b', 'x', TIMESTAMP '2026-01-01 00:00:02')`)
	brokers := srv.KafkaAddrs()
	hopTopic := streamplan.RepartitionTopic(srv.cfg.AppID, "ev", []string{"u"})
	copies := func(committed bool) []string {
		var out []string
		for _, v := range readOutput(ctx, t, brokers, hopTopic, committed) {
			if v != "" { // markers carry no value
				out = append(out, v)
			}
		}
		return out
	}
	waitFor(t, 20*time.Second, "the at-least-once hop's copies, read_committed without a commit", func() bool {
		return len(copies(true)) == 2
	})

	execAll(ctx, t, conn, `CREATE STREAM eos WITH (processing_guarantee = 'exactly_once', strategy = 'repartition') AS `+perU)
	srv.mu.Lock()
	h := srv.streams["eos"].hop
	shared := h != nil && h == srv.streams["alo"].hop && h.eos
	srv.mu.Unlock()
	if !shared {
		t.Fatal("eos does not share alo's hop, upgraded to exactly-once")
	}
	// Event times behind the watermark (2 s): the hop's transaction stays
	// open.
	execAll(ctx, t, conn, `INSERT INTO ev VALUES ('c', 'x', TIMESTAMP '2026-01-01 00:00:01'), ('d', 'x', TIMESTAMP '2026-01-01 00:00:02')`)
	waitFor(t, 20*time.Second, "the exactly-once hop's new copies, read_uncommitted", func() bool {
		return len(copies(false)) == 4
	})
	if got := copies(true); len(got) != 2 {
		t.Fatalf("read_committed sees %d copies before the exactly-once hop commits, want the 2 written before the upgrade", len(got))
	}

	zombie, err := srv.kafka.NewTxnProducer(ctx, h.cfg.Group+"-0", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	zombie.Close()
	// A row that moves the watermark makes the hop commit: it finds itself
	// fenced and starts again.
	execAll(ctx, t, conn, `INSERT INTO ev VALUES ('e', 'x', TIMESTAMP '2026-01-01 00:00:25')`)
	waitFor(t, 30*time.Second, "the fenced hop to start again", func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return restartsOf(srv, "hop "+hopTopic) > 0 && h.stage.Err() == nil
	})
	execAll(ctx, t, conn, `FLUSH`)

	committed := copies(true)
	slices.Sort(committed)
	if len(committed) != 5 || len(slices.Compact(slices.Clone(committed))) != 5 {
		t.Errorf("read_committed copies %v, want the 5 rows once each", committed)
	}
	if all := copies(false); len(all) < 7 {
		t.Errorf("read_uncommitted sees %d copies, want the aborted transaction's 2 beside the 5", len(all))
	}
	for _, name := range []string{"alo", "eos"} {
		rows, err := conn.Query(ctx, "SELECT u, ws, n FROM "+name)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for rows.Next() {
			var u string
			var ws time.Time
			var n int64
			if err := rows.Scan(&u, &ws, &n); err != nil {
				t.Fatal(err)
			}
			got = append(got, fmt.Sprintf("%s %s %d", u, ws.UTC().Format("15:04:05"), n))
		}
		rows.Close()
		if want := []string{"x 00:00:00 4"}; !slices.Equal(got, want) {
			t.Errorf("%s: panes %v, want %v (each row once)", name, got, want)
		}
	}
}
