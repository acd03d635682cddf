package kafkaio

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestFlushGivenUpThenReused: a Flush whose context ends while records
// are in flight (a shutdown) returns; the same Pending then produces and
// flushes again while the first records are still in flight, and a Flush
// that returns nil leaves nothing in flight. (A sync.WaitGroup behind it
// once panicked a server in the audit: a given-up Flush left its Wait
// running, and a Produce that came as that Wait woke up is "WaitGroup is
// reused before previous Wait has returned". That race is too narrow to
// hit on cue; this checks the reuse it came from.)
func TestFlushGivenUpThenReused(t *testing.T) {
	k := slowBroker(t, 1, 150*time.Millisecond)
	p := k.NewPending()
	for round := 0; round < 5; round++ {
		p.Produce(context.Background(), &Record{Topic: "t", Partition: 0, Value: []byte("x")})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := p.Flush(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("round %d: Flush gave %v, want it to give up", round, err)
		}
	}
	p.Produce(context.Background(), &Record{Topic: "t", Partition: 0, Value: []byte("y")})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := p.idleCh(); got != closedChan {
		t.Fatal("records still in flight after a Flush that returned nil")
	}
}

// slowBroker starts a kfake broker with topic t of parts partitions whose
// every produce answers after delay, and a client of it.
func slowBroker(t *testing.T, parts int32, delay time.Duration) *Client {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		time.Sleep(delay)
		return nil, nil, false
	})
	k := clientOf(t, c)
	return k
}

// TestStalled: records Kafka answers slowly but steadily are not stalled
// however long the producing goes on (a commit writing millions of
// records); records unanswered for longer than the limit between two
// looks are; nothing in flight never is.
func TestStalled(t *testing.T) {
	k := slowBroker(t, 1, 200*time.Millisecond)
	p := k.NewPending()
	if p.Stalled(0) {
		t.Fatal("stalled with nothing in flight")
	}
	ctx := context.Background()
	rec := func() *Record { return &Record{Topic: "t", Partition: 0, Value: []byte("x")} }
	p.Produce(ctx, rec())
	if p.Stalled(50 * time.Millisecond) {
		t.Fatal("stalled at the first look")
	}
	time.Sleep(120 * time.Millisecond)
	if !p.Stalled(50 * time.Millisecond) {
		t.Fatal("not stalled with a record unanswered for 120ms, limit 50ms")
	}
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		p.Produce(ctx, rec())
		if p.Stalled(800 * time.Millisecond) {
			t.Fatal("stalled while Kafka answers every 200ms, limit 800ms")
		}
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := p.Flush(fctx); err != nil {
		t.Fatal(err)
	}
	if p.Stalled(0) {
		t.Fatal("stalled after a Flush")
	}
}
