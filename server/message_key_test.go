package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/state"
)

// TestMessageKeyPlacement reads the output topics of streams keyed with
// message_key (stateless, windowed with early fires, upsert) and checks
// every record: a row whose key column is non-NULL has exactly that text
// as its Kafka key and sits on state.PartitionFor(key, n), where Kafka's
// Java client would put it; a NULL row is unkeyed. It checks again after a
// restart, when the streams come back from the catalog's CREATE text.
func TestMessageKeyPlacement(t *testing.T) {
	parallel(t)
	if testBrokers() != "" {
		isolateTopics(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	srv := startTestServer(t, dir)
	defer func() { srv.Close() }()
	conn := connect(ctx, t, srv)
	exec := func(q string) {
		t.Helper()
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`CREATE SOURCE mk_in (user_id TEXT, region TEXT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
		WITH (topic = 'mk_in', partitions = 4, partition_key = 'region')`)
	// Stateless, on more output partitions than input ones.
	exec(`CREATE STREAM mk_rows WITH (topic = 'mk_rows', partitions = 6, message_key = 'user_id') AS
		SELECT user_id, region, amount, ts FROM mk_in`)
	// Windowed with early fires: both kinds of pane are keyed.
	exec(`CREATE STREAM mk_win WITH (topic = 'mk_win', partitions = 8, message_key = 'user_id') AS
		SELECT region, user_id, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM mk_in
		GROUP BY region, user_id, TUMBLE(ts, INTERVAL '1' MINUTE) EMIT EVERY INTERVAL '100' MILLISECOND`)
	// Upsert: message_key wins over the group key.
	exec(`CREATE STREAM mk_up WITH (topic = 'mk_up', partitions = 5, message_key = 'user_id') AS
		SELECT region, user_id, SUM(amount) AS total FROM mk_in GROUP BY region, user_id`)

	insert := func(minute int) {
		var vals []string
		for i := 0; i < 120; i++ {
			user := fmt.Sprintf("'user-%d'", i%37)
			switch i % 23 {
			case 0:
				user = "NULL"
			case 1:
				user = "''" // an empty key is a key, not a NULL
			}
			vals = append(vals, fmt.Sprintf("(%s, 'r%d', %d, TIMESTAMP '2026-01-01 00:%02d:%02d')", user, i%5, i, minute, i%60))
		}
		exec("INSERT INTO mk_in VALUES " + strings.Join(vals, ", "))
		exec("FLUSH")
	}
	insert(0)
	time.Sleep(500 * time.Millisecond) // early fires of the open minute
	insert(2)                          // closes minute 0
	checkKeyed(ctx, t, srv, "mk_rows", "user_id", 240, false)
	checkKeyed(ctx, t, srv, "mk_win", "user_id", 1, true)
	checkKeyed(ctx, t, srv, "mk_up", "user_id", 1, false)

	conn.Close(ctx)
	srv.Close()
	srv = startTestServer(t, dir)
	conn = connect(ctx, t, srv)
	defer conn.Close(ctx)
	insert(4)
	checkKeyed(ctx, t, srv, "mk_rows", "user_id", 360, false)
	checkKeyed(ctx, t, srv, "mk_win", "user_id", 1, true)
	checkKeyed(ctx, t, srv, "mk_up", "user_id", 1, false)
}

// checkKeyed reads topic and checks each record's key and partition
// against its JSON value's col, and that at least min records were read.
// early: the topic must hold both early (is_final false) and final panes.
func checkKeyed(ctx context.Context, t *testing.T, srv *Server, topic, col string, min int, early bool) {
	t.Helper()
	n, err := srv.kafka.Partitions(ctx, topic)
	if err != nil || n == 0 {
		t.Fatalf("partitions of %s: %d, %v", topic, n, err)
	}
	var total, nulls, empty int
	finals := map[bool]int{}
	parts := map[int32]bool{}
	err = srv.kafka.ReadAll(ctx, topic, func(r *kgo.Record) error {
		total++
		var row map[string]any
		if err := json.Unmarshal(r.Value, &row); err != nil {
			return fmt.Errorf("%s/%d@%d: value %s: %v", topic, r.Partition, r.Offset, r.Value, err)
		}
		if f, ok := row["is_final"].(bool); ok {
			finals[f]++
		}
		v, present := row[col]
		if !present {
			return fmt.Errorf("%s/%d@%d: the key column %s is not in the value %s", topic, r.Partition, r.Offset, col, r.Value)
		}
		if v == nil {
			nulls++
			if r.Key != nil {
				return fmt.Errorf("%s/%d@%d: NULL %s, but key %q", topic, r.Partition, r.Offset, col, r.Key)
			}
			return nil
		}
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s/%d@%d: %s is %T in %s", topic, r.Partition, r.Offset, col, v, r.Value)
		}
		if r.Key == nil || !bytes.Equal(r.Key, []byte(s)) {
			return fmt.Errorf("%s/%d@%d: key %q (nil %v), want %q", topic, r.Partition, r.Offset, r.Key, r.Key == nil, s)
		}
		if s == "" {
			empty++
		}
		if want := state.PartitionFor(r.Key, n); r.Partition != want {
			return fmt.Errorf("%s: key %q is on partition %d of %d; murmur2 puts it on %d", topic, r.Key, r.Partition, n, want)
		}
		parts[r.Partition] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if total < min || nulls == 0 || empty == 0 {
		t.Fatalf("%s: %d records (want at least %d), %d with a NULL key, %d with an empty key: want some of each", topic, total, min, nulls, empty)
	}
	if len(parts) < 2 {
		t.Fatalf("%s: keyed records on %d partition(s) of %d", topic, len(parts), n)
	}
	if early && (finals[true] == 0 || finals[false] == 0) {
		t.Fatalf("%s: %d final and %d early panes, want both", topic, finals[true], finals[false])
	}
}
