package kafkaio

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestTopicsCreatedWithReplication: on a three-broker cluster, topics are
// created with the Conn's replication factor and min.insync.replicas (the
// settings a real cluster needs), the broker's defaults when unset, and a
// factor larger than the cluster is refused naming the flag.
func TestTopicsCreatedWithReplication(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	open := func(rf, isr int) *Client {
		return clientWith(t, &Conn{Brokers: c.ListenAddrs(), ReplicationFactor: rf, MinInsyncReplicas: isr})
	}
	replicated := open(3, 2)
	compact := "compact"
	if n, err := replicated.EnsureTopic(ctx, "internal", 2, map[string]*string{"cleanup.policy": &compact}); err != nil || n != 2 {
		t.Fatalf("EnsureTopic: %d partitions, %v", n, err)
	}
	if _, err := open(0, 0).EnsureTopic(ctx, "defaults", 1, nil); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(replicated.cl)
	td, err := adm.ListTopics(ctx, "internal", "defaults")
	if err != nil {
		t.Fatal(err)
	}
	for topic, want := range map[string]int{"internal": 3, "defaults": 3} { // kfake's default: min(3, brokers)
		for p, pd := range td[topic].Partitions {
			if len(pd.Replicas) != want {
				t.Errorf("%s/%d: %d replicas, want %d", topic, p, len(pd.Replicas), want)
			}
		}
	}
	rc, err := adm.DescribeTopicConfigs(ctx, "internal")
	if err != nil {
		t.Fatal(err)
	}
	cfgs := map[string]string{}
	for _, e := range rc[0].Configs {
		if e.Value != nil {
			cfgs[e.Key] = *e.Value
		}
	}
	if cfgs["min.insync.replicas"] != "2" || cfgs["cleanup.policy"] != "compact" {
		t.Errorf("configs of internal: min.insync.replicas %q, cleanup.policy %q; want 2 and compact", cfgs["min.insync.replicas"], cfgs["cleanup.policy"])
	}
	_, err = open(5, 0).EnsureTopic(ctx, "too-wide", 1, nil)
	if err == nil || !strings.Contains(err.Error(), "--replication-factor") {
		t.Fatalf("a factor of 5 on 3 brokers: %v, want a refusal naming --replication-factor", err)
	}
}

// TestGrowTopicAlreadyGrown: every server of an app grows a stage's
// changelog when its input grows, so all but the first are refused by
// Kafka with INVALID_PARTITIONS ("already has N partitions"; kfake accepts
// the same count, so the test answers as Kafka does). Growing to the count
// the topic has is success; a count below it stays an error naming both.
func TestGrowTopicAlreadyGrown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "cl"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	k := clientOf(t, c)
	if err := k.EnsureCompacted(ctx, "cl", 8); err != nil {
		t.Fatalf("grow 4 -> 8: %v", err)
	}
	refused := 0
	c.ControlKey(int16(kmsg.CreatePartitions), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.CreatePartitionsRequest)
		resp := r.ResponseKind().(*kmsg.CreatePartitionsResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewCreatePartitionsResponseTopic()
			st.Topic, st.ErrorCode = rt.Topic, kerr.InvalidPartitions.Code
			msg := "Topic already has 8 partition(s)."
			st.ErrorMessage = &msg
			resp.Topics = append(resp.Topics, st)
		}
		refused++
		return resp, nil, true
	})
	if err := k.CreatePartitions(ctx, "cl", 8); err != nil {
		t.Fatalf("grow to 8 after another process did: %v", err)
	}
	err = k.CreatePartitions(ctx, "cl", 4)
	if err == nil || !strings.Contains(err.Error(), "it has 8") || !errors.Is(err, kerr.InvalidPartitions) {
		t.Fatalf("grow an 8-partition topic to 4: %v, want INVALID_PARTITIONS saying it has 8", err)
	}
	if refused != 2 {
		t.Fatalf("%d CreatePartitions requests refused, want 2: the test's refusal did not run", refused)
	}
}

// clientOf is a Client of kfake cluster c, closed with the test.
func clientOf(t *testing.T, c *kfake.Cluster) *Client {
	t.Helper()
	return clientWith(t, &Conn{Brokers: c.ListenAddrs()})
}

// clientWith is a Client on conn, closed with the test.
func clientWith(t *testing.T, conn *Conn) *Client {
	t.Helper()
	if err := conn.Validate(); err != nil {
		t.Fatal(err)
	}
	k, err := New(conn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	return k
}
