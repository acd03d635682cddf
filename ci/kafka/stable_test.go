//go:build realkafka

package kafkaci

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/turbinesql/turbinesql/kafkaio"
)

// A task opening partition 0 reads its committed offset while the holder
// of partition 1 has died between committing its offset in a transaction
// and ending the transaction (a SIGKILL mid-commit). Kafka keeps that
// offset unstable until the transaction times out (60 s for tasks) or a
// new holder of partition 1 fences it. The open must not wait for that:
// it runs in the group's assignment callback, and a member stuck there
// does not rejoin the group's next rebalance, which is what would give
// partition 1 a new holder. The 3-node audit on Apache Kafka saw a
// SIGKILLed node's tasks with no owner for 73 s this way.
//
// (kfake answers UNSTABLE_OFFSET_COMMIT for every partition of a group
// while any transaction commits offsets for it, so only a real broker
// shows the difference.)
func TestStableOffsetsIgnoreAnotherPartitionsOpenTransaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, adm := admin(t)
	id := runID()
	topic, group := "stable-"+id, "stable-group-"+id
	createTopic(ctx, t, adm, topic, 2)
	k := engineClient(t)

	// Partition 0: a committed transaction left offset 5. (With a record:
	// kgo ends a transaction it produced nothing in without an EndTxn,
	// which would leave this offset pending too.)
	tx0, err := k.NewTxnProducer(ctx, "stable-0-"+id, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer tx0.Close()
	if err := tx0.Commit(ctx, kafkaio.TxnCommit{Group: group, Topic: topic, Partition: 0, Offset: 5, Metadata: "p0",
		Progress: &kafkaio.Record{Topic: topic, Partition: 0, Value: []byte("progress")}}); err != nil {
		t.Fatalf("commit partition 0: %v", err)
	}

	// Partition 1: offset 7 committed in a transaction that never ends.
	dead := "stable-1-" + id
	td, err := adm.ListTopics(ctx, topic)
	if err != nil || td[topic].Err != nil {
		t.Fatalf("describe %s: %v %v", topic, err, td[topic].Err)
	}
	openTxnOffsetCommit(ctx, t, dead, group, topic, td[topic].ID, 1, 7)

	// Without the partitions named, the open transaction shows: this is
	// what held a task's open for the transaction's whole timeout.
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	_, err = k.StableOffsets(short, group, topic)
	cancelShort()
	if err == nil {
		t.Fatal("offsets of every partition read as stable while partition 1's transaction is open: the test set-up does not reproduce the dead holder")
	}

	t0 := time.Now()
	short, cancelShort = context.WithTimeout(ctx, 5*time.Second)
	got, err := k.StableOffsets(short, group, topic, 0)
	cancelShort()
	if err != nil {
		t.Fatalf("offset of partition 0 after %s: %v (it waited for partition 1's open transaction)", time.Since(t0).Round(time.Millisecond), err)
	}
	if c, ok := got[0]; !ok || c.Offset != 5 || c.Metadata != "p0" || len(got) != 1 {
		t.Fatalf("stable offsets of partition 0 = %v, want only 0: offset 5, metadata p0", got)
	}

	// Fencing partition 1 (its next holder opening) aborts the dead
	// transaction: then every partition is stable, and 1 has nothing.
	tx1, err := k.NewTxnProducer(ctx, dead, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Close()
	all, err := k.StableOffsets(ctx, group, topic)
	if err != nil {
		t.Fatalf("offsets after fencing partition 1's holder: %v", err)
	}
	if _, ok := all[1]; ok || all[0].Offset != 5 {
		t.Fatalf("offsets after the abort = %v, want only partition 0 at 5", all)
	}
}

// openTxnOffsetCommit commits offset at of partition p in group inside a
// transaction of transactional id txnID that it leaves open, as a task
// SIGKILLed between its TxnOffsetCommit and its EndTxn does.
func openTxnOffsetCommit(ctx context.Context, t *testing.T, txnID, group, topic string, topicID [16]byte, p int32, at int64) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env(t, "TURBINE_TEST_BROKERS")), kgo.TransactionalID(txnID), kgo.TransactionTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close() // a raw transaction: Close has none to end
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatalf("init producer %s: %v", txnID, err)
	}
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = txnID, pid, epoch, group
	aresp, err := add.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(aresp.ErrorCode)
	}
	if err != nil {
		t.Fatalf("add offsets to transaction: %v", err)
	}
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = txnID, group, pid, epoch
	req.Generation, req.MemberID = -1, ""
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic, rt.TopicID = topic, topicID // the ID for v6+
	rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.LeaderEpoch = p, at, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("commit offset in transaction: %v", err)
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				t.Fatalf("commit offset of %s/%d in transaction: %v", topic, rp.Partition, err)
			}
		}
	}
}

// engineClient is the engine's Kafka client of the broker under test,
// closed with the test.
func engineClient(t *testing.T) *kafkaio.Client {
	t.Helper()
	conn := &kafkaio.Conn{Brokers: strings.Split(env(t, "TURBINE_TEST_BROKERS"), ",")}
	if err := conn.Validate(); err != nil {
		t.Fatal(err)
	}
	k, err := kafkaio.New(conn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	return k
}
