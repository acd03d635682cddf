package server

import (
	"fmt"
	"testing"
	"time"
)

// TestFlushLiftDoesNotFollowPeersAfterward: a FLUSH lifts a partition
// read to its end to its peers' highest watermark as they stood then, and
// no further. Here, after a FLUSH, new rows reach partition 1 first and
// carry its watermark a minute ahead; partition 0's rows of the same
// second, written a moment later, are not late: every pane is there, in a
// local, a repartition and a combine stream. (When the lift followed the
// peers, partition 0 jumped to partition 1's watermark at its next tick
// and dropped its own rows as late; the race behind flaky runs of
// TestHopPurgeFollowsSlowestReader, made certain here by waiting.)
func TestFlushLiftDoesNotFollowPeersAfterward(t *testing.T) {
	parallel(t)
	ctx, _, conn := testSession(t, time.Minute)
	// idle_timeout far above the test: only FLUSH may lift a partition.
	execAll(ctx, t, conn,
		`CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts)
			WITH (topic = 'ev', partitions = 2, partition_key = 'k', idle_timeout = INTERVAL '10' MINUTE)`)
	streams := []string{"local", "repartition", "combine"}
	for _, s := range streams {
		execAll(ctx, t, conn, fmt.Sprintf(`CREATE STREAM lift_%s WITH (strategy = '%s') AS
			SELECT k, TUMBLE_START(ts, INTERVAL '1' SECOND) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' SECOND)`, s, s))
	}
	keys := keysByPartition(2, 1)
	a, b := keys[0][0], keys[1][0]
	insert := func(k, ts string) {
		t.Helper()
		q := fmt.Sprintf("INSERT INTO ev VALUES ('%s', TIMESTAMP '2026-01-01 %s')", k, ts)
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	pane := func(stream, k, ws string) (int64, bool) {
		t.Helper()
		var n int64
		q := fmt.Sprintf("SELECT n FROM lift_%s WHERE k = '%s' AND ws = TIMESTAMP '2026-01-01 %s'", stream, k, ws)
		if err := conn.QueryRow(ctx, q).Scan(&n); err != nil {
			return 0, false
		}
		return n, true
	}
	insert(a, "00:00:00")
	insert(b, "00:00:00")
	execAll(ctx, t, conn, "FLUSH")

	// Partition 1 runs a minute ahead; its local windows close on it.
	insert(b, "00:00:01")
	insert(b, "00:01:00")
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, ok := pane("local", b, "00:00:01"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("partition 1's window never closed on its own watermark")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Partition 0's task ticks (commits) many times meanwhile.
	time.Sleep(time.Second)
	insert(a, "00:00:01")
	insert(a, "00:01:00")
	execAll(ctx, t, conn, "FLUSH")
	for _, s := range streams {
		for _, k := range []string{a, b} {
			for _, ws := range []string{"00:00:00", "00:00:01"} {
				if n, ok := pane(s, k, ws); !ok || n != 1 {
					t.Errorf("lift_%s: pane %s %s: n=%d (there: %v), want 1", s, k, ws, n, ok)
				}
			}
		}
	}
	for _, s := range streams {
		if late := showLate(ctx, t, conn, "lift_"+s); late != 0 {
			t.Errorf("lift_%s: %d late rows", s, late)
		}
	}
}
