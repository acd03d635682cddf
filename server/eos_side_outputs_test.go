package server

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestExactlyOnceSideOutputsRideTheTransaction: under exactly-once a dead
// letter and a late row ride the transaction of the batch that produced
// them, with the input offsets (the seed: "All of them ride the same
// transaction as the batch that produced them"). A window closes at a
// commit; neither a late row nor a record that does not decode moves the
// watermark, so with a long commit interval (and idle_timeout) their
// transaction stays open: a read_uncommitted consumer of the dead-letter
// and late-data topics sees them already, a read_committed one sees
// nothing until the commit (FLUSH), and then each once.
func TestExactlyOnceSideOutputsRideTheTransaction(t *testing.T) {
	parallel(t)
	if testBrokers() != "" {
		isolateTopics(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srv := startTestServer(t, t.TempDir(), func(c *Config) { c.CommitInterval = time.Minute })
	defer srv.Close()
	conn := connect(ctx, t, srv)
	defer conn.Close(ctx)
	execAll(ctx, t, conn,
		`CREATE SOURCE ev (k TEXT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 1, partition_key = 'k',
			on_error = 'dlq', dlq_topic = 'ev_dlq', idle_timeout = INTERVAL '1' HOUR)`,
		`CREATE STREAM per_k WITH (processing_guarantee = 'exactly_once', late_data_topic = 'per_k_late') AS
			SELECT k, TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '10' SECOND)`,
		`INSERT INTO ev VALUES ('a', 1, TIMESTAMP '2026-01-01 00:00:01'), ('a', 2, TIMESTAMP '2026-01-01 00:00:25')`)
	brokers := srv.KafkaAddrs()
	// The watermark (25 s) closes [0 s, 10 s) in a commit.
	waitFor(t, 20*time.Second, "the pane of [0 s, 10 s), committed", func() bool {
		return len(readOutput(ctx, t, brokers, "per_k", true)) == 1
	})
	// A row of it is late now; then a record that does not decode.
	execAll(ctx, t, conn, `INSERT INTO ev VALUES ('a', 3, TIMESTAMP '2026-01-01 00:00:02')`)
	bad := `{"k": "a", "v": "not a number", "ts": "2026-01-01T00:00:26Z"}`
	if err := srv.kafka.ProduceSync(ctx, []*kgo.Record{{Topic: "ev", Key: []byte("a"), Value: []byte(bad)}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the late row and the dead letter, uncommitted", func() bool {
		return len(readOutput(ctx, t, brokers, "per_k_late", false)) == 1 && len(readOutput(ctx, t, brokers, "ev_dlq", false)) == 1
	})
	for _, topic := range []string{"per_k_late", "ev_dlq"} {
		if got := readOutput(ctx, t, brokers, topic, true); len(got) != 0 {
			t.Errorf("%s: read_committed sees %v before the transaction commits", topic, got)
		}
	}
	execAll(ctx, t, conn, `FLUSH`)
	late := readOutput(ctx, t, brokers, "per_k_late", true)
	if len(late) != 1 || !jsonHas(t, late[0], "v", 3.0) {
		t.Errorf("per_k_late, read_committed after the commit: %v, want the late row once", late)
	}
	if dead := readOutput(ctx, t, brokers, "ev_dlq", true); len(dead) != 1 || dead[0] != bad {
		t.Errorf("ev_dlq, read_committed after the commit: %v, want the dead letter once", dead)
	}
	if panes := readOutput(ctx, t, brokers, "per_k", true); len(panes) != 1 || !jsonHas(t, panes[0], "n", 1.0) {
		t.Errorf("per_k, read_committed after the commit: %v, want the pane of [0 s, 10 s) once, n 1", panes)
	}
}

// jsonHas reports whether the JSON object doc has field equal to want (a
// number as float64, as encoding/json reads it).
func jsonHas(t *testing.T, doc, field string, want any) bool {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatalf("%q: %v", doc, err)
	}
	return m[field] == want
}
