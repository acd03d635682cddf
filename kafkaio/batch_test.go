package kafkaio

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestLargeCommitFitsTopicLimit: one transaction of 20 MB of small
// records (a commit that closes a window of a few hundred thousand
// groups) to a topic that takes batches of at most 1 MB (Kafka's
// default max.message.bytes) commits: the producer never lets a batch
// grow past what a topic accepts, while a single record up to its
// topic's own limit still goes alone. Produce answers late, as a busy
// broker does, so records pile up behind each request.
func TestLargeCommitFitsTopicLimit(t *testing.T) {
	k := slowBroker(t, 2, 5*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if n, err := k.MaxMessageBytes(ctx, "t"); err != nil || n > 1_100_000 {
		t.Fatalf("topic t takes %d bytes (%v), want Kafka's default of about 1 MB", n, err)
	}
	big := "big"
	if _, err := k.EnsureTopic(ctx, big, 1, map[string]*string{"max.message.bytes": ptr(fmt.Sprint(3 << 20))}); err != nil {
		t.Fatal(err)
	}
	var err error
	for _, eos := range []bool{true, false} {
		t.Run(fmt.Sprintf("exactly_once=%v", eos), func(t *testing.T) {
			var out interface {
				Produce(context.Context, *Record)
				Flush(context.Context) error
			}
			var txn *TxnProducer
			if eos {
				if txn, err = k.NewTxnProducer(ctx, "txn-large", 30*time.Second); err != nil {
					t.Fatal(err)
				}
				defer txn.Close()
				out = txn
			} else {
				out = k.NewPending()
			}
			value := make([]byte, 200)
			for i := range 100_000 {
				out.Produce(ctx, &Record{Topic: "t", Partition: int32(i % 2), Key: []byte(fmt.Sprintf("key-%07d", i)), Value: value})
			}
			// A record larger than t takes, to a topic made for it.
			out.Produce(ctx, &Record{Topic: big, Partition: 0, Value: make([]byte, 2<<20)})
			out.Produce(ctx, &Record{Topic: big, Partition: 0, Value: []byte("after")})
			if err := out.Flush(ctx); err != nil {
				t.Fatalf("20 MB in small records: %v", err)
			}
			if txn != nil {
				if err := txn.Commit(ctx, TxnCommit{}); err != nil {
					t.Fatalf("commit: %v", err)
				}
			}
		})
	}
}

func ptr(s string) *string { return &s }
