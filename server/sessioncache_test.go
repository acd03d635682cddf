package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSessionsInSmallCache runs a SESSION stream with far more open
// sessions than a 1 MB group cache holds (thousands of keys at once, a
// few hundred bytes each), across a clean restart, and compares every
// session it emits with sessions computed here from the same rows: keys
// leave memory and come back, sessions close while not in memory, and the
// restarted server reads nothing up front.
func TestSessionsInSmallCache(t *testing.T) {
	parallel(t)
	if testBrokers() != "" {
		isolateTopics(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	small := func(c *Config) { c.StateCacheMB = 1 }
	srv := startTestServer(t, dir, small)
	conn := connect(ctx, t, srv)
	for _, q := range []string{
		`CREATE SOURCE ev (k TEXT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH (topic = 'ev', partitions = 2, partition_key = 'k')`,
		`CREATE STREAM sess WITH (topic = 'sess') AS SELECT k, SESSION_START(ts, INTERVAL '10' SECOND) AS s, COUNT(*) AS n, SUM(v) AS total
			FROM ev GROUP BY k, SESSION(ts, INTERVAL '10' SECOND)`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	const keys, rows, gap = 30000, 60000, int64(10_000)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	rng := rand.New(rand.NewPCG(11, 17))
	type row struct {
		k  string
		v  int64
		ts int64
	}
	all := make([]row, rows)
	for i := range all {
		// Event time only moves forward (no row is late); a key comes
		// back after a random pause, within its session's gap or not.
		all[i] = row{fmt.Sprintf("k%d", rng.IntN(keys)), rng.Int64N(100), base + int64(i)*2}
	}
	insert := func(rs []row) {
		for len(rs) > 0 {
			n := min(len(rs), 500)
			var sb strings.Builder
			sb.WriteString("INSERT INTO ev VALUES ")
			for i, r := range rs[:n] {
				if i > 0 {
					sb.WriteString(", ")
				}
				fmt.Fprintf(&sb, "('%s', %d, TIMESTAMP '%s')", r.k, r.v, time.UnixMilli(r.ts).UTC().Format("2006-01-02 15:04:05.000"))
			}
			if _, err := conn.Exec(ctx, sb.String()); err != nil {
				t.Fatal(err)
			}
			rs = rs[n:]
		}
	}
	insert(all[:rows/2])
	if _, err := conn.Exec(ctx, "FLUSH"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	srv.Close()

	srv = startTestServer(t, dir, small)
	defer srv.Close()
	conn = connect(ctx, t, srv)
	defer conn.Close(ctx)
	insert(all[rows/2:])
	// A row an hour on closes every session but its own.
	insert([]row{{"zz", 0, base + 3_600_000}})
	if _, err := conn.Exec(ctx, "FLUSH"); err != nil {
		t.Fatal(err)
	}

	// The sessions, computed from the rows: per key in time order, a row
	// within gap of the session's last row extends it.
	type sess struct {
		start, last, n, total int64
	}
	open := map[string]*sess{}
	var want []string
	emit := func(k string, s *sess) {
		want = append(want, fmt.Sprintf("%s %s %d %d", k, time.UnixMilli(s.start).UTC().Format("15:04:05.000"), s.n, s.total))
	}
	for _, r := range all {
		if s := open[r.k]; s != nil && r.ts < s.last+gap {
			s.last, s.n, s.total = r.ts, s.n+1, s.total+r.v
			continue
		} else if s != nil {
			emit(r.k, s)
		}
		open[r.k] = &sess{r.ts, r.ts, 1, r.v}
	}
	for k, s := range open {
		emit(k, s)
	}
	slices.Sort(want)

	res, err := conn.Query(ctx, "SELECT k, s, n, total FROM sess")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for res.Next() {
		var k string
		var s time.Time
		var n, total int64
		if err := res.Scan(&k, &s, &n, &total); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %s %d %d", k, s.UTC().Format("15:04:05.000"), n, total))
	}
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("%d sessions emitted, %d computed; differences %s", len(got), len(want), diffLines(got, want))
	}
}

// diffLines names a few lines only one of two sorted lists holds.
func diffLines(a, b []string) string {
	count := map[string]int{}
	for _, x := range a {
		count[x]++
	}
	for _, x := range b {
		count[x]--
	}
	var only []string
	for x, n := range count {
		if n != 0 && len(only) < 6 {
			only = append(only, fmt.Sprintf("%+d %s", n, x))
		}
	}
	slices.Sort(only)
	return fmt.Sprint(only)
}
