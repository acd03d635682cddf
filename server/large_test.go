package server

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/turbinesql/turbinesql/kafkaio"
)

// TestLargeRecords: a source topic that holds 3 MB records. An undecodable
// 1.5 MB record fits its dead-letter topic (created as large as the
// source's); a valid record whose output is larger than the output topic
// accepts follows the source's on_error (dead-lettered here, skipped on a
// skipping source) and never fails the stream.
func TestLargeRecords(t *testing.T) {
	parallel(t)
	ctx, srv, conn := testSession(t, 2*time.Minute)
	big := "3145728"
	if _, err := srv.kafka.EnsureTopic(ctx, "big", 1, map[string]*string{"max.message.bytes": &big}); err != nil {
		t.Fatal(err)
	}
	execAll(ctx, t, conn,
		`CREATE SOURCE big_dlq (k TEXT, v BIGINT) WITH (topic = 'big', on_error = 'dlq', dlq_topic = 'big_dead', partition_key = 'k')`,
		`CREATE SOURCE big_skip (k TEXT, v BIGINT) WITH (topic = 'big', on_error = 'skip')`,
		`CREATE STREAM out_dlq WITH (topic = 'out_dlq', message_key = 'k') AS SELECT k, v FROM big_dlq`,
		`CREATE STREAM out_skip WITH (topic = 'out_skip') AS SELECT k, v FROM big_skip`,
	)
	huge := strings.Repeat("x", 1_500_000)
	rec := func(k string, v any) *kafkaio.Record {
		val, _ := json.Marshal(map[string]any{"k": k, "v": v})
		return &kafkaio.Record{Topic: "big", Partition: 0, Value: val}
	}
	if err := srv.kafka.ProduceSync(ctx, []*kafkaio.Record{
		rec("small", 1), rec(huge, "not a number"), rec(huge, 2), rec("small2", 3),
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "FLUSH"); err != nil {
		t.Fatalf("FLUSH: %v", err)
	}
	for name, want := range map[string][2]int64{"out_dlq": {2, 2}, "out_skip": {2, 0}} {
		status, msg := streamStatus(ctx, t, conn, name)
		if status != "running" {
			t.Fatalf("%s: %s %s", name, status, msg)
		}
		var out int64
		if err := conn.QueryRow(ctx, "SELECT COUNT(*) FROM "+name).Scan(&out); err != nil {
			t.Fatal(err)
		}
		if out != want[0] {
			t.Errorf("%s: %d output rows, want %d", name, out, want[0])
		}
	}
	var dead []*kafkaio.Record
	if err := srv.kafka.ReadAll(ctx, "big_dead", func(r *kafkaio.Record) error { dead = append(dead, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(dead) != 2 {
		t.Fatalf("%d dead letters, want 2 (the undecodable record, the oversized output)", len(dead))
	}
	var poison, oversized *kafkaio.Record
	for _, r := range dead {
		for _, h := range r.Headers {
			if h.Key != "turbine.error" {
				continue
			}
			switch {
			case strings.Contains(string(h.Value), "want a BIGINT"):
				poison = r
			case strings.Contains(string(h.Value), "larger than topic out_dlq accepts"):
				oversized = r
			}
		}
	}
	if poison == nil || oversized == nil {
		t.Fatalf("dead letters %v: want the undecodable record and the oversized output", dead)
	}
	if len(poison.Value) < 1_500_000 {
		t.Errorf("the undecodable record was cut to %d bytes: its dead-letter topic should hold it", len(poison.Value))
	}
}
