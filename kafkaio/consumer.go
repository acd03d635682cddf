package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
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
	Records   []*Record
	// HighWatermark is the partition's log end offset as the fetch saw it.
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
		out = append(out, FetchPart{Partition: fp.Partition, Records: fp.Records, HighWatermark: fp.HighWatermark})
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

// Pending produces records asynchronously on the shared producer and lets
// its owner (one task) wait until every one of them is acknowledged: the
// task's commit point.
type Pending struct {
	k   *Client
	wg  sync.WaitGroup
	mu  sync.Mutex
	err error
}

// NewPending is an empty set of pending records.
func (k *Client) NewPending() *Pending { return &Pending{k: k} }

// Produce sends rec; a failure is reported by the next Flush.
func (p *Pending) Produce(ctx context.Context, rec *Record) { p.ProduceOr(ctx, rec, nil) }

// ProduceOr is Produce, except that a record its topic refuses as too
// large is handed to tooLarge (which may produce something else instead)
// rather than failing the next Flush. Kafka refuses a whole batch when one
// of its records is too large, so a refused record is first sent again on
// its own: only one that is too large alone goes to tooLarge.
func (p *Pending) ProduceOr(ctx context.Context, rec *Record, tooLarge func(*Record)) {
	p.wg.Add(1)
	p.k.cl.Produce(ctx, rec, func(_ *Record, err error) {
		if err != nil && tooLarge != nil && IsTooLarge(err) {
			go func() { // not on the producer's callback goroutine
				defer p.wg.Done()
				if err := p.k.produceAlone(ctx, rec); err != nil {
					if IsTooLarge(err) {
						tooLarge(rec) // before Done: what it produces is waited for too
						return
					}
					p.setErr(rec, err)
				}
			}()
			return
		}
		if err != nil {
			p.setErr(rec, err)
		}
		p.wg.Done()
	})
}

func (p *Pending) setErr(rec *Record, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = fmt.Errorf("write to %s: %w", rec.Topic, err)
	}
}

// produceAlone sends rec in a batch of its own: retries of refused records
// go one at a time, each waiting for its answer.
func (k *Client) produceAlone(ctx context.Context, rec *Record) error {
	k.aloneMu.Lock()
	defer k.aloneMu.Unlock()
	r := &Record{Topic: rec.Topic, Partition: rec.Partition, Key: rec.Key, Value: rec.Value, Headers: rec.Headers, Timestamp: rec.Timestamp}
	return k.cl.ProduceSync(ctx, r).FirstErr()
}

// Flush waits for every record produced so far and returns the first
// failure among them (then forgets it).
func (p *Pending) Flush(ctx context.Context) error {
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.err
	p.err = nil
	return err
}
