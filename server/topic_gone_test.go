package server

import (
	"context"
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
