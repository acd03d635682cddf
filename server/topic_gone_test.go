package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestInputTopicDeleted: a stream whose input topic is deleted under it
// fails with the reason and what to do, instead of waiting for records
// forever as if it were running; the other streams run on.
func TestInputTopicDeleted(t *testing.T) {
	parallel(t)
	if testBrokers() != "" {
		isolateTopics(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := startTestServer(t, t.TempDir())
	defer srv.Close()
	conn := connect(ctx, t, srv)
	defer conn.Close(ctx)
	for _, q := range []string{
		`CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 1, partition_key = 'k')`,
		`CREATE SOURCE other (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'other', partitions = 1, partition_key = 'k')`,
		`CREATE STREAM counts AS SELECT k, COUNT(*) AS n FROM ev GROUP BY k`,
		`CREATE STREAM others AS SELECT k, COUNT(*) AS n FROM other GROUP BY k`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// The server's own connection settings (SASL and TLS on a shared
	// broker), pointed at the brokers it uses.
	kc := srv.cfg.Kafka
	kc.Brokers = srv.KafkaAddrs()
	cl, err := kgo.NewClient(kc.Opts()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).DeleteTopic(ctx, "ev"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the stream over the deleted topic to fail", func() bool {
		st, _ := streamStatus(ctx, t, conn, "counts")
		return st == "failed"
	})
	if _, msg := streamStatus(ctx, t, conn, "counts"); !strings.Contains(msg, "input topic no longer exists: ev") || !strings.Contains(msg, "DROP the stream") {
		t.Errorf("error %q should name the deleted topic and what to do", msg)
	}
	if st, _ := streamStatus(ctx, t, conn, "others"); st != "running" {
		t.Errorf("the other stream is %s", st)
	}
}

// TestTopicDeletedUnderStream: whichever topic a running stream depends on
// is deleted (its output topic, its repartition hop's or combine's
// internal topic, or the output of the stream it reads), the stream fails
// with an error naming that topic instead of showing running forever, on
// either delivery guarantee; the other streams run on and the server
// keeps answering.
func TestTopicDeletedUnderStream(t *testing.T) {
	for _, c := range []struct {
		name    string
		streams []string // created in order; the first is the one that must fail
		delete  string   // the topic deleted
		also    []string // streams that must fail too
		quiet   bool     // nothing is written after the deletion
		restart bool     // ALTER STREAM ... RESTART creates the topic again and runs
	}{
		{name: "output, restarted", streams: []string{`CREATE STREAM gone WITH (topic = 'gone_out', processing_guarantee = 'exactly_once') AS SELECT k, COUNT(*) AS n FROM ev GROUP BY k`},
			delete: "gone_out", restart: true},
		{name: "late-data topic", streams: []string{`CREATE STREAM gone WITH (late_data_topic = 'gone_late') AS SELECT k, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`},
			delete: "gone_late", quiet: true},
		{name: "output, nothing more to write", streams: []string{`CREATE STREAM gone WITH (topic = 'gone_out') AS SELECT k, COUNT(*) AS n FROM ev GROUP BY k`},
			delete: "gone_out", quiet: true},
		{name: "repartition hop, nothing more to write", streams: []string{`CREATE STREAM gone WITH (strategy = 'repartition') AS SELECT v, COUNT(*) AS n FROM ev GROUP BY v`},
			delete: "turbine-slt-rep-ev-by-v", quiet: true},
		{name: "output", streams: []string{`CREATE STREAM gone WITH (topic = 'gone_out') AS SELECT k, COUNT(*) AS n FROM ev GROUP BY k`},
			delete: "gone_out"},
		{name: "output exactly-once", streams: []string{`CREATE STREAM gone WITH (topic = 'gone_out', processing_guarantee = 'exactly_once') AS SELECT k, COUNT(*) AS n FROM ev GROUP BY k`},
			delete: "gone_out"},
		{name: "output keyless", streams: []string{`CREATE STREAM gone WITH (topic = 'gone_out') AS SELECT k, v FROM ev WHERE v >= 0`},
			delete: "gone_out"},
		{name: "repartition hop", streams: []string{`CREATE STREAM gone WITH (strategy = 'repartition') AS SELECT v, COUNT(*) AS n FROM ev GROUP BY v`},
			delete: "turbine-slt-rep-ev-by-v"},
		{name: "repartition hop exactly-once", streams: []string{`CREATE STREAM gone WITH (strategy = 'repartition', processing_guarantee = 'exactly_once') AS SELECT v, COUNT(*) AS n FROM ev GROUP BY v`},
			delete: "turbine-slt-rep-ev-by-v"},
		{name: "combine", streams: []string{`CREATE STREAM gone WITH (strategy = 'combine') AS SELECT v, COUNT(*) AS n, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS w FROM ev GROUP BY v, TUMBLE(ts, INTERVAL '1' MINUTE)`},
			delete: "turbine-slt-cmb-ev-gone"},
		{name: "combine exactly-once", streams: []string{`CREATE STREAM gone WITH (strategy = 'combine', processing_guarantee = 'exactly_once') AS SELECT v, COUNT(*) AS n, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS w FROM ev GROUP BY v, TUMBLE(ts, INTERVAL '1' MINUTE)`},
			delete: "turbine-slt-cmb-ev-gone"},
		{name: "read stream's output", streams: []string{`CREATE STREAM gone AS SELECT k, v FROM up WHERE v > 0`},
			delete: "up", also: []string{"up"}},
		{name: "read stream's output exactly-once", streams: []string{`CREATE STREAM gone WITH (processing_guarantee = 'exactly_once') AS SELECT k, v FROM up WHERE v > 0`},
			delete: "up", also: []string{"up"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			parallel(t)
			if testBrokers() != "" {
				isolateTopics(t)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			srv := startTestServer(t, t.TempDir())
			defer srv.Close()
			conn := connect(ctx, t, srv)
			defer conn.Close(ctx)
			for _, q := range append([]string{
				`CREATE SOURCE ev (k TEXT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 2, partition_key = 'k')`,
				`CREATE SOURCE other (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'other', partitions = 1, partition_key = 'k')`,
				`CREATE STREAM others AS SELECT k, COUNT(*) AS n FROM other GROUP BY k`,
				`CREATE STREAM up WITH (topic = 'up') AS SELECT k, v, ts FROM ev WHERE v >= 0`,
			}, c.streams...) {
				if _, err := conn.Exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			insert := func(i int) {
				t.Helper()
				q := fmt.Sprintf(`INSERT INTO ev VALUES ('a%d', %d, TIMESTAMP '2026-01-01 00:00:00' + INTERVAL '%d' MINUTE), ('b%d', %d, TIMESTAMP '2026-01-01 00:00:00' + INTERVAL '%d' MINUTE)`, i, i%3, i, i, i%3, i)
				if _, err := conn.Exec(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			insert(0)
			insert(1)
			if _, err := conn.Exec(ctx, `FLUSH`); err != nil {
				t.Fatal(err)
			}
			for _, s := range append([]string{"gone"}, c.also...) {
				if st, msg := streamStatus(ctx, t, conn, s); st != "running" {
					t.Fatalf("%s before the deletion: %s %s", s, st, msg)
				}
			}
			kc := srv.cfg.Kafka
			kc.Brokers = srv.KafkaAddrs()
			cl, err := kgo.NewClient(kc.Opts()...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if _, err := kadm.NewClient(cl).DeleteTopic(ctx, c.delete); err != nil {
				t.Fatal(err)
			}
			// Rows keep coming (unless quiet): the stream has something
			// to write.
			i := 2
			for _, s := range append([]string{"gone"}, c.also...) {
				waitFor(t, 30*time.Second, s+" to fail", func() bool {
					if !c.quiet {
						insert(i)
						i++
					}
					st, _ := streamStatus(ctx, t, conn, s)
					return st == "failed"
				})
				if _, msg := streamStatus(ctx, t, conn, s); !strings.Contains(msg, c.delete) || !strings.Contains(msg, "no longer exists") {
					t.Errorf("%s's error %q should say that topic %s no longer exists", s, msg, c.delete)
				}
			}
			if c.restart {
				if _, err := conn.Exec(ctx, `ALTER STREAM gone RESTART`); err != nil {
					t.Fatal(err)
				}
				if st, msg := streamStatus(ctx, t, conn, "gone"); st != "running" {
					t.Fatalf("gone after RESTART: %s %s", st, msg)
				}
				if n, err := srv.kafka.Partitions(ctx, c.delete); err != nil || n == 0 {
					t.Fatalf("RESTART did not create %s again: %d partitions, %v", c.delete, n, err)
				}
			}
			if st, msg := streamStatus(ctx, t, conn, "others"); st != "running" {
				t.Errorf("the other stream is %s: %s", st, msg)
			}
			if _, err := conn.Exec(ctx, `INSERT INTO other VALUES ('x', TIMESTAMP '2026-01-01 00:00:00')`); err != nil {
				t.Fatal(err)
			}
			// FLUSH flushes every other stream and names the failed ones.
			if _, err := conn.Exec(ctx, `FLUSH`); c.restart && err != nil {
				t.Fatalf("FLUSH after RESTART: %v", err)
			} else if !c.restart && (err == nil || !strings.Contains(err.Error(), "stream gone failed: ")) {
				t.Fatalf("FLUSH after the deletion: %v, want the failed stream named", err)
			}
			var n int64
			if err := conn.QueryRow(ctx, `SELECT n FROM others WHERE k = 'x'`).Scan(&n); err != nil || n != 1 {
				t.Errorf("the other stream's count: %d, %v", n, err)
			}
		})
	}
}

// TestFlushNamesTheOnlyStreamThatCouldNotStart: FLUSH on a process whose
// only stream could not start (here: ALTER STREAM ... RESTART after its
// input topic was deleted) names the failed stream, as it does beside
// running streams. With no stage to run, no step ran and FLUSH returned
// success at once: under load a restart that failed left a rescaled
// app's only stream failed on the process asked, and the SELECT after
// that FLUSH found 848 panes of 1978. Every plan, both guarantees.
func TestFlushNamesTheOnlyStreamThatCouldNotStart(t *testing.T) {
	parallel(t)
	plans := map[string]string{
		"local":       `SELECT k, COUNT(*) AS n FROM ev GROUP BY k`,
		"repartition": `SELECT v, COUNT(*) AS n FROM ev GROUP BY v`,
		"combine":     `SELECT k, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`,
		"keyless":     `SELECT TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM ev GROUP BY TUMBLE(ts, INTERVAL '1' MINUTE)`,
	}
	for _, plan := range []string{"local", "repartition", "combine", "keyless"} {
		for _, guarantee := range []string{"at_least_once", "exactly_once"} {
			t.Run(plan+"_"+guarantee, func(t *testing.T) {
				strategy := ""
				if plan == "repartition" || plan == "combine" {
					strategy = ", strategy = '" + plan + "'"
				}
				testFlushNamesFailedStream(t, fmt.Sprintf(`CREATE STREAM counts WITH (processing_guarantee = '%s'%s) AS %s`, guarantee, strategy, plans[plan]))
			})
		}
	}
}

func testFlushNamesFailedStream(t *testing.T, create string) {
	if testBrokers() != "" {
		isolateTopics(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := startTestServer(t, t.TempDir())
	defer srv.Close()
	conn := connect(ctx, t, srv)
	defer conn.Close(ctx)
	for _, q := range []string{
		`CREATE SOURCE ev (k TEXT, v TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 2, partition_key = 'k')`,
		create,
		`INSERT INTO ev VALUES ('a', 'x', TIMESTAMP '2026-01-01 00:00:00')`,
		`FLUSH`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	kc := srv.cfg.Kafka
	kc.Brokers = srv.KafkaAddrs()
	cl, err := kgo.NewClient(kc.Opts()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).DeleteTopic(ctx, "ev"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the stream over the deleted topic to fail", func() bool {
		st, _ := streamStatus(ctx, t, conn, "counts")
		return st == "failed"
	})
	if _, err := conn.Exec(ctx, `ALTER STREAM counts RESTART`); err == nil {
		t.Fatal("RESTART of a stream whose input topic is gone succeeded")
	}
	if st, msg := streamStatus(ctx, t, conn, "counts"); st != "failed" {
		t.Fatalf("after the RESTART that failed the stream is %s %s, want failed", st, msg)
	}
	_, err = conn.Exec(ctx, `FLUSH`)
	if err == nil || !strings.Contains(err.Error(), "stream counts failed: ") {
		t.Fatalf("FLUSH: %v, want the failed stream named", err)
	}
}
