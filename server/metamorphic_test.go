package server

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"
)

var metamorphicSeed = flag.Uint64("metamorphic.seed", 0, "seed of TestMetamorphicStrategies (0: from the clock)")

// TestMetamorphicStrategies runs the same aggregations over the same input
// under every strategy that can serve them (local, repartition, combine),
// on 1 and 4 source partitions, with batches of 1 and 4096 records, and
// checks the final panes are identical everywhere. Aggregates are exact
// (COUNT, SUM, MIN, MAX, COUNT DISTINCT, VAR_SAMP over BIGINT), and the
// input's disorder stays within the watermark bound, so no strategy may
// differ in anything.
func TestMetamorphicStrategies(t *testing.T) {
	parallel(t)
	seed := *metamorphicSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -args -metamorphic.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 5))
	var rows []string
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	n := 300 + rng.IntN(300)
	for i := 0; i < n; i++ {
		ms := int64(i)*40 + rng.Int64N(1500) // disorder under the 2 s bound
		ts := base.Add(time.Duration(ms) * time.Millisecond).Format("2006-01-02 15:04:05.000")
		g := fmt.Sprintf("'g%d'", rng.IntN(5))
		if rng.IntN(20) == 0 {
			g = "NULL"
		}
		rows = append(rows, fmt.Sprintf("('k%d', %s, %d, TIMESTAMP '%s')", rng.IntN(20), g, rng.Int64N(1000)-300, ts))
	}
	// A final row far ahead closes every window the data touched.
	rows = append(rows, fmt.Sprintf("('k0', 'g0', 0, TIMESTAMP '%s')", base.Add(time.Hour).Format("2006-01-02 15:04:05")))

	const aggs = "COUNT(*) AS n, SUM(v) AS s, MIN(v) AS lo, MAX(v) AS hi, COUNT(DISTINCT v) AS d, VAR_SAMP(v) AS var"
	queries := map[string]string{
		"k_local": "strategy = 'local'", "k_repartition": "strategy = 'repartition'", "k_combine": "strategy = 'combine'",
		"g_repartition": "strategy = 'repartition'", "g_combine": "strategy = 'combine'",
	}
	var reference map[string]string // stream family (k or g) → its panes, from the first run
	for _, parts := range []int{1, 4} {
		for _, batch := range []int{1, 4096} {
			results := runMetamorphic(t, parts, batch, rows, queries, aggs)
			for name, got := range results {
				family := name[:1]
				if reference == nil {
					reference = map[string]string{}
				}
				if want, ok := reference[family]; !ok {
					reference[family] = got
				} else if got != want {
					t.Fatalf("seed %d, %d partitions, batch %d: %s differs:\n--- got\n%s--- want\n%s", seed, parts, batch, name, got, want)
				}
			}
		}
	}
	if strings.Count(reference["k"], "\n") < 5 {
		t.Fatalf("too few panes to compare: %q", reference["k"])
	}
}

func runMetamorphic(t *testing.T, parts, batch int, rows []string, queries map[string]string, aggs string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := Start(ctx, Config{DataDir: t.TempDir(), PGAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", KafkaAddr: "127.0.0.1:0",
		AppID: "meta", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxPollRecords: batch})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	conn := connect(ctx, t, srv)
	defer conn.Close(ctx)
	exec := func(q string) {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%d partitions, batch %d: %s: %v", parts, batch, q, err)
		}
	}
	// No partition may pass for idle (the default idle_timeout is 5 s): a
	// task that starts late under load would find its rows' windows
	// closed by its peers, and the strategies would differ by timing.
	// FLUSH, at the end, lifts every partition to the far-ahead row.
	exec(fmt.Sprintf("CREATE SOURCE ev (k TEXT, g TEXT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '2' SECOND) WITH (topic = 'ev', partitions = %d, partition_key = 'k', idle_timeout = '10 minutes')", parts))
	names := make([]string, 0, len(queries))
	for name := range queries {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		col := name[:1]
		exec(fmt.Sprintf("CREATE STREAM %s WITH (topic = '%s', %s) AS SELECT %s, TUMBLE_START(ts, INTERVAL '5' SECOND) AS ws, %s FROM ev GROUP BY %s, TUMBLE(ts, INTERVAL '5' SECOND)",
			name, name, queries[name], col, aggs, col))
	}
	for i := 0; i < len(rows); i += 100 {
		exec("INSERT INTO ev VALUES " + strings.Join(rows[i:min(i+100, len(rows))], ", "))
	}
	exec("FLUSH")
	out := map[string]string{}
	for _, name := range names {
		col := name[:1]
		r, err := conn.Query(ctx, fmt.Sprintf("SELECT %s, ws, n, s, lo, hi, d, var FROM %s ORDER BY ws, %s", col, name, col))
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for r.Next() {
			vals, err := r.Values()
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(&b, vals...)
		}
		r.Close()
		out[name] = b.String()
	}
	return out
}
