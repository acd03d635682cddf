package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Consumer reads the partitions of one topic assigned to it, each from a
// given offset. Partitions can be added and removed while it runs.
type Consumer struct {
	cl    *kgo.Client
	topic string
	max   int
}

// FetchPart is what one poll brought of one partition.
type FetchPart struct {
	Partition int32
	// Records are the data records, in offset order: never a
	// transaction's control record (its commit or abort marker), nor a
	// record of an aborted transaction.
	Records []*Record
	// Next is the offset after the last record the fetch covered, control
	// records included (0: none): a partition whose last record is a
	// transaction marker is read to its end only past the marker.
	Next int64
	// HighWatermark is the partition's end as the fetch saw it: its last
	// stable offset, the end of what a read_committed reader can read.
	HighWatermark int64
}

// NewConsumer starts a consumer of topic at the given offsets; a poll
// returns at most maxPoll records.
func (k *Client) NewConsumer(topic string, assign map[int32]int64, maxPoll int) (*Consumer, error) {
	offs := map[int32]kgo.Offset{}
	for p, o := range assign {
		offs[p] = kgo.NewOffset().At(o)
	}
	cl, err := kgo.NewClient(k.conn.Opts(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offs}),
		kgo.FetchMaxWait(250*time.Millisecond),
		kgo.FetchMaxPartitionBytes(8<<20),
		// Every reader reads committed: an exactly-once stream's outputs,
		// hop records and partials count once their transaction commits,
		// and never when it aborts. Without transactions on a topic this
		// reads exactly what read_uncommitted would.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Control records come through so the reader sees its position
		// move past a transaction's marker (Next).
		kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return nil, fmt.Errorf("consumer of %s: %w", topic, err)
	}
	return &Consumer{cl: cl, topic: topic, max: maxPoll}, nil
}

// Poll waits for records and returns them by partition. A cancelled ctx
// returns nothing and no error.
func (c *Consumer) Poll(ctx context.Context) ([]FetchPart, error) {
	fs := c.cl.PollRecords(ctx, c.max)
	if ctx.Err() != nil {
		return nil, nil
	}
	for _, fe := range fs.Errors() {
		if errors.Is(fe.Err, context.Canceled) {
			return nil, nil
		}
		return nil, fmt.Errorf("read %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
	}
	var out []FetchPart
	fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		out = append(out, splitControl(fp.FetchPartition))
	})
	return out, nil
}

// Add starts reading more partitions, each from its offset.
func (c *Consumer) Add(assign map[int32]int64) {
	offs := map[int32]kgo.Offset{}
	for p, o := range assign {
		offs[p] = kgo.NewOffset().At(o)
	}
	c.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{c.topic: offs})
}

// Close stops the consumer.
func (c *Consumer) Close() { c.cl.Close() }

// CommitOffsets records offsets (the next offset to read, per partition of
// topic) for consumer group group, as a simple (memberless) commit, so
// Kafka's own tools show the group's lag.
func (k *Client) CommitOffsets(ctx context.Context, group, topic string, offsets map[int32]int64) error {
	if len(offsets) == 0 {
		return nil
	}
	os := kadm.Offsets{}
	for p, o := range offsets {
		os.Add(kadm.Offset{Topic: topic, Partition: p, At: o, LeaderEpoch: -1})
	}
	resp, err := k.adm.CommitOffsets(ctx, group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("commit offsets of group %s: %w", group, err)
	}
	return nil
}

// GroupOffsets reads the committed offsets of group on topic.
func (k *Client) GroupOffsets(ctx context.Context, group, topic string) (map[int32]int64, error) {
	resp, err := k.adm.FetchOffsets(ctx, group)
	if err != nil {
		return nil, fmt.Errorf("fetch offsets of group %s: %w", group, err)
	}
	out := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil {
			out[o.Partition] = o.At
		}
	})
	return out, nil
}

// splitControl takes the control records out of a fetched partition,
// keeping where they end.
func splitControl(fp kgo.FetchPartition) FetchPart {
	out := FetchPart{Partition: fp.Partition, Records: fp.Records, HighWatermark: fp.LastStableOffset}
	if out.HighWatermark < 0 {
		out.HighWatermark = fp.HighWatermark // a broker that sent no LSO
	}
	if n := len(fp.Records); n > 0 {
		out.Next = fp.Records[n-1].Offset + 1
	}
	for i, r := range fp.Records {
		if r.Attrs.IsControl() {
			data := make([]*Record, 0, len(fp.Records)-1)
			data = append(data, fp.Records[:i]...)
			for _, r := range fp.Records[i+1:] {
				if !r.Attrs.IsControl() {
					data = append(data, r)
				}
			}
			out.Records = data
			break
		}
	}
	return out
}

// DeleteGroups deletes consumer groups and their committed offsets; a
// group that does not exist is no error. A coordinator that is not there
// yet (a new cluster creating its offsets topic) is waited for, as long as
// ctx allows.
func (k *Client) DeleteGroups(ctx context.Context, groups ...string) error {
	for {
		err := k.deleteGroups(ctx, groups)
		if err == nil || !kerr.IsRetriable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (k *Client) deleteGroups(ctx context.Context, groups []string) error {
	resp, err := k.adm.DeleteGroups(ctx, groups...)
	if err != nil {
		return fmt.Errorf("delete consumer groups %v: %w", groups, err)
	}
	for _, g := range resp {
		if g.Err != nil && !errors.Is(g.Err, kerr.GroupIDNotFound) {
			return fmt.Errorf("delete consumer group %s: %w", g.Group, g.Err)
		}
	}
	return nil
}
