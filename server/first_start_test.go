package server

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/kafkaio"
)

// TestFirstStartFailureRecovers: a stream restarts (ALTER STREAM ...
// RESTART; recoverStream and a resize take the same path), and one task
// of one of its stages fails to open in the stage's first assignment,
// fenced as when the group moved its partition meanwhile (TaskMigrated,
// a failure a restart cures). The statement reports it, the stream is
// failed, and then restarts by itself with its back-off, whichever stage
// it was: the final stage (local), the combine's pre-aggregation
// (combine, keyless) or the repartition hop in front of it, which is
// started anew for the stream and, until recoverHop restarted the stream
// for a hop that never started, left it failed for good. The panes after
// that are the right ones, under both guarantees.
func TestFirstStartFailureRecovers(t *testing.T) {
	parallel(t)
	const win = `TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n`
	const by = `TUMBLE(ts, INTERVAL '10' SECOND)`
	plans := []struct {
		name, with, query string
		stage             func(*Server) string // the consumer group of the stage that fails to start
		panes             []string
	}{
		{"local", "", `SELECT k, ` + win + ` FROM ev GROUP BY k, ` + by,
			func(s *Server) string { return s.groupName("counts") },
			[]string{"00:00:00 1", "00:00:00 1", "00:00:10 1"}},
		{"repartition", ", strategy = 'repartition'", `SELECT u, ` + win + ` FROM ev GROUP BY u, ` + by,
			func(s *Server) string {
				s.mu.Lock()
				defer s.mu.Unlock()
				return s.streams["counts"].hop.topic
			},
			[]string{"00:00:00 2", "00:00:10 1"}},
		{"combine", ", strategy = 'combine'", `SELECT u, ` + win + ` FROM ev GROUP BY u, ` + by,
			func(s *Server) string { return combineTopic(s.cfg.AppID, "ev", "counts") },
			[]string{"00:00:00 2", "00:00:10 1"}},
		{"keyless", "", `SELECT ` + win + ` FROM ev GROUP BY ` + by,
			func(s *Server) string { return combineTopic(s.cfg.AppID, "ev", "counts") },
			[]string{"00:00:00 2", "00:00:10 1"}},
	}
	for _, plan := range plans {
		for _, guarantee := range []string{"at_least_once", "exactly_once"} {
			t.Run(plan.name+"_"+guarantee, func(t *testing.T) {
				parallel(t)
				if testBrokers() != "" {
					isolateTopics(t)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
				defer cancel()
				var target atomic.Pointer[string] // armed: fail the next task of this group to open
				var failed atomic.Int32
				srv := startTestServer(t, t.TempDir(), func(c *Config) {
					c.beforeOpen = func(group string, p int32) error {
						if g := target.Load(); g != nil && *g == group && target.CompareAndSwap(g, nil) {
							failed.Add(1)
							return &dataflow.TaskMigrated{Partition: p, Err: kafkaio.ErrFenced}
						}
						return nil
					}
				})
				defer srv.Close()
				conn := connect(ctx, t, srv)
				defer conn.Close(ctx)
				execAll(ctx, t, conn,
					`CREATE SOURCE ev (k TEXT, u TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 2, partition_key = 'k')`,
					fmt.Sprintf(`CREATE STREAM counts WITH (processing_guarantee = '%s'%s) AS %s`, guarantee, plan.with, plan.query),
					`INSERT INTO ev VALUES ('a', 'x', TIMESTAMP '2026-01-01 00:00:01'), ('b', 'x', TIMESTAMP '2026-01-01 00:00:02')`,
					`FLUSH`)
				group := plan.stage(srv)
				target.Store(&group)
				if _, err := conn.Exec(ctx, `ALTER STREAM counts RESTART`); err == nil {
					t.Fatalf("RESTART succeeded; the start of %s should have failed (%d failures injected)", group, failed.Load())
				}
				if failed.Load() != 1 {
					t.Fatalf("%d task opens of %s failed, want 1", failed.Load(), group)
				}
				waitFor(t, 30*time.Second, "the stream to restart by itself after its failed start", func() bool {
					st, _ := streamStatus(ctx, t, conn, "counts")
					return st == "running"
				})
				if n := restartsOf(srv, "stream counts"); n != 1 {
					t.Errorf("the stream restarted %d times after its failed start, want 1", n)
				}
				execAll(ctx, t, conn,
					`INSERT INTO ev VALUES ('a', 'x', TIMESTAMP '2026-01-01 00:00:12'), ('b', 'x', TIMESTAMP '2026-01-01 00:00:25')`,
					`FLUSH`)
				rows, err := conn.Query(ctx, `SELECT ws, n FROM counts ORDER BY ws, n`)
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for rows.Next() {
					var ws time.Time
					var n int64
					if err := rows.Scan(&ws, &n); err != nil {
						t.Fatal(err)
					}
					got = append(got, fmt.Sprintf("%s %d", ws.UTC().Format("15:04:05"), n))
				}
				rows.Close()
				if err := rows.Err(); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, plan.panes) {
					t.Errorf("panes %v, want %v", got, plan.panes)
				}
			})
		}
	}
}
