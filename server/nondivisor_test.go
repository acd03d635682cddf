package server

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestNonDivisorWarnings: under TURBINE_ALLOW_NON_DIVISOR_PARTITIONS=1 a
// stream whose keyed state lives on a topic whose count does not divide
// 960 starts, and the client creating it gets a WARNING naming the topic,
// its count, the closest valid counts and what to set, on every plan: a
// repartition topic (also for a stream joining the hop on a count it did
// not ask for), a combine topic (exactly-once here), the input of a local
// aggregation. Streams whose state does not depend on that count get no
// warning. The log names each topic concerned at CREATE and again at every
// start of the server (the hop once, shared as it is).
func TestNonDivisorWarnings(t *testing.T) {
	parallel(t)
	if testBrokers() != "" {
		isolateTopics(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var logs *syncBuffer
	start := func() *Server {
		logs = &syncBuffer{}
		return startTestServer(t, dir, func(c *Config) {
			c.AllowNonDivisor = true
			c.Logger = slog.New(slog.NewTextHandler(logs, nil))
		})
	}
	srv := start()
	defer func() { srv.Close() }()
	conn := connectNotices(ctx, t, srv)
	defer conn.Close(ctx)
	exec := func(q string) []*pgconn.Notice {
		t.Helper()
		conn.takeNotices()
		execAll(ctx, t, conn.Conn, q)
		return conn.takeNotices()
	}
	app := srv.cfg.AppID
	rep := "turbine-" + app + "-rep-six-by-other"
	cmb := "turbine-" + app + "-cmb-six-by_other_cmb"
	exec(`CREATE SOURCE six (k TEXT, other TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'six', partitions = 6, partition_key = 'k')`)
	exec(`CREATE SOURCE seven (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'seven', partitions = 7, partition_key = 'k')`)

	const msg = "keyed state on a partition count that does not divide 960 can be rescaled only to a count that divides 960 (started anyway: TURBINE_ALLOW_NON_DIVISOR_PARTITIONS=1)"
	for _, tc := range []struct {
		stmt, topic, option string
	}{
		{`CREATE STREAM by_other_rep WITH (strategy = 'repartition', repartition_partitions = 7) AS
			SELECT other, COUNT(*) AS n FROM six GROUP BY other, TUMBLE(ts, INTERVAL '1' MINUTE)`, rep, "set repartition_partitions to a valid count"},
		// The hop runs on 7: a stream sharing it without asking for a count reads 7 as well.
		{`CREATE STREAM by_other_rep2 WITH (strategy = 'repartition') AS
			SELECT other, SUM(1) AS n FROM six GROUP BY other, TUMBLE(ts, INTERVAL '1' MINUTE)`, rep, "set repartition_partitions to a valid count"},
		{`CREATE STREAM by_other_cmb WITH (strategy = 'combine', combine_partitions = 7, processing_guarantee = 'exactly_once') AS
			SELECT other, COUNT(*) AS n FROM six GROUP BY other, TUMBLE(ts, INTERVAL '1' MINUTE)`, cmb, "set combine_partitions to a valid count"},
		{`CREATE STREAM per_k AS SELECT k, COUNT(*) AS n FROM seven GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`, "seven", "recreate the topic with a valid count"},
	} {
		ns := exec(tc.stmt)
		if len(ns) != 1 {
			t.Fatalf("%s: %d notices, want 1: %v", tc.stmt, len(ns), ns)
		}
		n := ns[0]
		want := `topic "` + tc.topic + `" has 7 partitions, which does not divide 960: keyed state on it can be rescaled only to a count that divides 960 (closest valid counts: 6 and 8)`
		if n.Severity != "WARNING" || n.Message != want || !strings.Contains(n.Hint, tc.option) || !strings.Contains(n.Detail, "TURBINE_ALLOW_NON_DIVISOR_PARTITIONS=1") {
			t.Errorf("%s: notice %s %q detail %q hint %q; want WARNING %q, hint %q", tc.stmt, n.Severity, n.Message, n.Detail, n.Hint, want, tc.option)
		}
		logs.waitLine(t, msg, "topic="+tc.topic+" ", "partitions=7", `closest_valid="6 and 8"`, `fix="`+tc.option+`"`)
	}
	// No warning where the count does not hold keyed state, or divides 960.
	for _, q := range []string{
		`CREATE STREAM copy7 AS SELECT k, ts FROM seven`,
		`CREATE STREAM total7 AS SELECT COUNT(*) AS n FROM seven GROUP BY TUMBLE(ts, INTERVAL '1' MINUTE)`,
		`CREATE STREAM per_k6 AS SELECT k, COUNT(*) AS n FROM six GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`,
		`CREATE STREAM by_other_cmb6 WITH (strategy = 'combine') AS SELECT other, COUNT(*) AS n FROM six GROUP BY other, TUMBLE(ts, INTERVAL '1' MINUTE)`,
	} {
		if ns := exec(q); len(ns) != 0 {
			t.Errorf("%s: notices %v, want none", q, ns)
		}
	}
	// The streams run: a row through each warned plan comes out.
	exec(`INSERT INTO six VALUES ('a', 'x', TIMESTAMP '2026-01-01 00:00:01'), ('b', 'x', TIMESTAMP '2026-01-01 00:00:02'), ('c', 'y', TIMESTAMP '2026-01-01 00:02:00')`)
	exec(`INSERT INTO seven VALUES ('a', TIMESTAMP '2026-01-01 00:00:01'), ('a', TIMESTAMP '2026-01-01 00:00:03'), ('a', TIMESTAMP '2026-01-01 00:02:00')`)
	exec("FLUSH")
	for q, want := range map[string]string{
		"SELECT other, n FROM by_other_rep":  "x=2",
		"SELECT other, n FROM by_other_rep2": "x=2",
		"SELECT other, n FROM by_other_cmb":  "x=2",
		"SELECT k, n FROM per_k":             "a=2",
	} {
		if got := keyCounts(ctx, t, conn.Conn, q); got != want {
			t.Errorf("%s: %s, want %s", q, got, want)
		}
	}

	// Every start repeats the warning, next to each topic concerned.
	conn.Close(ctx)
	srv.Close()
	srv = start()
	for _, topic := range []string{rep, cmb, "seven"} {
		logs.waitLine(t, msg, "topic="+topic+" ", "partitions=7", `closest_valid="6 and 8"`)
	}
	count := func(topic string) int {
		n := 0
		for _, l := range logs.lines(msg) {
			if strings.Contains(l, "topic="+topic+" ") {
				n++
			}
		}
		return n
	}
	if n := count(rep); n != 1 {
		t.Errorf("the shared hop's topic warned %d times at the start, want once: %q", n, logs.lines(msg))
	}
	if n := count("six"); n != 0 {
		t.Errorf("topic six (6 partitions) warned: %q", logs.lines(msg))
	}
}
