package server

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// TestCloseWithManyStreams: a node running 13 exactly-once streams (local
// and repartitioned, so two stages and a shared hop among them) next to
// another node of its app stops cleanly well within the shutdown budget
// (serve gives 9 s): its stages commit, leave their groups and hand over
// at the same time, not one after another. The other node then owns every
// partition.
func TestCloseWithManyStreams(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	_, start := appNodes(t, 4, "closing", func(c *Config) { c.SessionTimeout = 6 * time.Second })
	a := start(t.TempDir())
	conn := connect(ctx, t, a)
	execAll(ctx, t, conn, `CREATE SOURCE ev (k TEXT, u TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 4, partition_key = 'k')`)
	var names []string
	for i := 0; i < 13; i++ {
		name, strategy := fmt.Sprintf("s%d", i), "local"
		if i%2 == 1 {
			strategy = "repartition"
		}
		execAll(ctx, t, conn, fmt.Sprintf(`CREATE STREAM %s WITH (processing_guarantee = 'exactly_once', strategy = '%s') AS
			SELECT k, TUMBLE_START(ts, INTERVAL '1' SECOND) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' SECOND)`, name, strategy))
		names = append(names, name)
	}
	conn.Close(ctx)
	b := start(t.TempDir())
	defer func() { b.Close() }()
	for _, s := range names {
		waitOwned(t, "both nodes to own partitions of "+s, func() bool {
			na, nb := owned(a, s), owned(b, s)
			return na > 0 && nb > 0 && na+nb == 4
		})
	}
	t0 := time.Now()
	a.Close()
	took := time.Since(t0)
	t.Logf("Close with %d streams: %s", len(names), took.Round(time.Millisecond))
	if took > closeBudget {
		t.Errorf("Close with %d streams took %s, over %s", len(names), took.Round(time.Millisecond), closeBudget)
	}
	for _, s := range names {
		waitOwned(t, "b to own every partition of "+s, func() bool { return owned(b, s) == 4 })
	}
}

// closeBudget is what TestCloseWithManyStreams allows a Close: well under
// serve's 9 s shutdown, which also stops pgwire and HTTP and flushes logs.
const closeBudget = 5 * time.Second

// slowStop is a stage whose Stop takes a while, counting how many stop at
// once.
type slowStop struct {
	now, peak *atomic.Int32
	stopped   *atomic.Int32
}

func (s slowStop) Stop() {
	n := s.now.Add(1)
	for {
		p := s.peak.Load()
		if n <= p || s.peak.CompareAndSwap(p, n) {
			break
		}
	}
	time.Sleep(50 * time.Millisecond)
	s.now.Add(-1)
	s.stopped.Add(1)
}

// TestStopConcurrentlyIsBounded: stages stop at the same time, never more
// than the limit at once, and all of them before it returns.
func TestStopConcurrentlyIsBounded(t *testing.T) {
	var now, peak, stopped atomic.Int32
	xs := make([]slowStop, 13)
	for i := range xs {
		xs[i] = slowStop{&now, &peak, &stopped}
	}
	t0 := time.Now()
	stopConcurrently(xs, 4)
	if stopped.Load() != 13 {
		t.Fatalf("%d of 13 stopped", stopped.Load())
	}
	if p := peak.Load(); p != 4 {
		t.Errorf("at most %d stopped at once, want 4 (the limit)", p)
	}
	// 13 stops of 50 ms, 4 at a time: 4 waves, 200 ms; one after
	// another would be 650 ms.
	if took := time.Since(t0); took > 500*time.Millisecond {
		t.Errorf("13 stops took %s", took)
	}
}
