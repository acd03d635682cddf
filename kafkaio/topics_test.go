package kafkaio

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
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
		conn := &Conn{Brokers: c.ListenAddrs(), ReplicationFactor: rf, MinInsyncReplicas: isr}
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
