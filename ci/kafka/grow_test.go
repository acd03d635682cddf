//go:build realkafka

package kafkaci

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Every server of an app grows a stage's changelog when the stage's input
// grows, at about the same moment. Kafka's controller refuses all but the
// first with INVALID_PARTITIONS (kfake accepts them), which failed the
// stream on the other servers: test-kafka's TestRescaleStoppedStream saw it.
// Four clients grow one topic from 4 to 8 at once; each must succeed.
func TestConcurrentGrowth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, adm := admin(t)
	topic := "grow-" + runID()
	createTopic(ctx, t, adm, topic, 4)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	start := make(chan struct{})
	for i := range errs {
		k := engineClient(t)
		if n, err := k.Partitions(ctx, topic); err != nil || n != 4 {
			t.Fatalf("client %d sees %d partitions (%v), want 4", i, n, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = k.EnsureCompacted(ctx, topic, 8)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("client %d: %v", i, err)
		}
	}
	td, err := adm.ListTopics(ctx, topic)
	if err != nil || td[topic].Err != nil {
		t.Fatalf("describe %s: %v %v", topic, err, td[topic].Err)
	}
	if n := len(td[topic].Partitions); n != 8 {
		t.Fatalf("%s has %d partitions, want 8", topic, n)
	}
}
