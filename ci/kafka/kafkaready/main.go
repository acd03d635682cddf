// Command kafkaready waits until a Kafka broker answers and can create and
// delete a topic, for ci/kafka/run.sh. It gives up when the broker process
// (-pid) exits or the timeout passes, and exits non-zero saying why.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "broker address")
	pid := flag.Int("pid", 0, "broker process id: stop waiting if it exits")
	timeout := flag.Duration("timeout", 90*time.Second, "how long to wait")
	flag.Parse()
	start := time.Now()
	if err := wait(*brokers, *pid, *timeout); err != nil {
		fmt.Fprintf(os.Stderr, "kafkaready: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("kafkaready: broker %s ready after %.1fs\n", *brokers, time.Since(start).Seconds())
}

func wait(brokers string, pid int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.RetryTimeout(2*time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var last error
	for {
		if pid > 0 && syscall.Kill(pid, 0) != nil {
			return fmt.Errorf("broker process %d exited (last error: %v)", pid, last)
		}
		if last = probe(ctx, adm); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("broker %s not ready after %v: %v", brokers, timeout, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// probe creates and deletes a throwaway topic: that needs the controller
// and the broker to be up, not just the listener.
func probe(ctx context.Context, adm *kadm.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := adm.BrokerMetadata(ctx); err != nil {
		return err
	}
	const topic = "turbinesql-ci-ready-probe"
	if r, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		return err
	} else if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
		return r.Err
	}
	rs, err := adm.DeleteTopics(ctx, topic)
	if err != nil {
		return err
	}
	return rs.Error()
}
