package server

import (
	"testing"
	"time"

	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/state"
)

// TestPointLookupFromState: `WHERE key = ...` over an upsert stream the
// server runs answers from the stream's own state. A record written into
// the output topic behind the stream's back shows in a scan of the topic,
// not in the lookup; a group HAVING rejects is absent from both.
func TestPointLookupFromState(t *testing.T) {
	ctx, srv, conn := testSession(t, time.Minute)
	execAll(ctx, t, conn,
		`CREATE SOURCE tx (account TEXT, amount BIGINT) WITH (topic = 'tx', partitions = 4, partition_key = 'account')`,
		`CREATE STREAM bal WITH (topic = 'bal') AS SELECT account, COUNT(*) AS n, SUM(amount) AS total FROM tx GROUP BY account HAVING SUM(amount) < 100`,
		`INSERT INTO tx VALUES ('a', 10), ('b', 5), ('a', 7), ('c', 500)`,
		`FLUSH`,
	)
	n, err := srv.kafka.Partitions(ctx, "bal")
	if err != nil {
		t.Fatal(err)
	}
	bogus := &kafkaio.Record{Topic: "bal", Key: []byte("a"), Partition: state.PartitionFor([]byte("a"), n), Value: []byte(`{"account":"a","n":99,"total":99}`)}
	if err := srv.kafka.ProduceSync(ctx, []*kafkaio.Record{bogus}); err != nil {
		t.Fatal(err)
	}
	var total int64
	if err := conn.QueryRow(ctx, "SELECT total FROM bal WHERE account = 'a'").Scan(&total); err != nil || total != 17 {
		t.Fatalf("lookup of a: %d, %v; want 17 from the stream's state", total, err)
	}
	if err := conn.QueryRow(ctx, "SELECT MAX(total) FROM bal").Scan(&total); err != nil || total != 99 {
		t.Fatalf("scan: max %d, %v; want the topic's 99", total, err)
	}
	var count int64
	if err := conn.QueryRow(ctx, "SELECT COUNT(*) FROM bal WHERE account = 'c'").Scan(&count); err != nil || count != 0 {
		t.Fatalf("lookup of c (HAVING rejects it): %d rows, %v", count, err)
	}
	if err := conn.QueryRow(ctx, "SELECT COUNT(*) FROM bal WHERE account = 'zzz'").Scan(&count); err != nil || count != 0 {
		t.Fatalf("lookup of an unknown key: %d rows, %v", count, err)
	}
}
