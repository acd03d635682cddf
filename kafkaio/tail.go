package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Tail follows every partition of one topic from chosen offsets, for a
// client that watches a stream's output as it is committed (SUBSCRIBE). It
// reads read_committed: a transactional writer's records show only once
// their transaction commits, and records written outside transactions
// show as soon as they are acknowledged.
type Tail struct {
	cl    *kgo.Client
	topic string
}

// TailFrom says where a Tail starts on each partition.
type TailFrom int

const (
	// TailFromStart reads every record still in the log.
	TailFromStart TailFrom = iota
	// TailFromEnd reads only records written after the Tail starts.
	TailFromEnd
)

// NewTail starts following topic. From the start, it also returns the log
// end offset of each partition that holds records now, so the caller can
// tell the records that were there already (a snapshot) from the ones that
// came after. floor[p], when set, is where partition p starts at the
// earliest (the records before it are not the reader's: a stream's output
// begins there).
func (k *Client) NewTail(ctx context.Context, topic string, from TailFrom, floor map[int32]int64) (*Tail, map[int32]int64, error) {
	ends, err := k.EndOffsets(ctx, topic)
	if err != nil {
		return nil, nil, err
	}
	starts := map[int32]int64{}
	if from == TailFromStart {
		so, err := k.adm.ListStartOffsets(ctx, topic)
		if err != nil {
			return nil, nil, fmt.Errorf("list start offsets of %s: %w", topic, err)
		}
		so.Each(func(o kadm.ListedOffset) {
			if o.Err == nil {
				starts[o.Partition] = o.Offset
			}
		})
	}
	offs := map[int32]kgo.Offset{}
	pending := map[int32]int64{}
	for p, end := range ends {
		at := end
		if from == TailFromStart {
			at = max(starts[p], floor[p])
			if at < end {
				pending[p] = end
			}
		}
		// From the end: a floor past the end is still the floor (an
		// end read read_committed may stop short of it).
		offs[p] = kgo.NewOffset().At(max(at, floor[p]))
	}
	cl, err := kgo.NewClient(k.conn.Opts(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offs}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transaction markers tell how far a partition has been read even
		// when its last offsets hold no record (Poll drops them).
		kgo.KeepControlRecords(),
		// A subscriber waits for new rows: short fetch waits keep the
		// delay between a commit and the row reaching the client small.
		kgo.FetchMaxWait(100*time.Millisecond),
	)...)
	if err != nil {
		return nil, nil, fmt.Errorf("follow %s: %w", topic, err)
	}
	return &Tail{cl: cl, topic: topic}, pending, nil
}

// NewTailAt follows topic from the given offset of each partition (a
// partition not given: from its start), e.g. from where ReadAllEnds stopped.
func (k *Client) NewTailAt(topic string, from map[int32]int64) (*Tail, error) {
	offs := map[int32]kgo.Offset{}
	for p, o := range from {
		offs[p] = kgo.NewOffset().At(o)
	}
	opts := []kgo.Opt{
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.FetchMaxWait(100 * time.Millisecond),
	}
	if len(offs) > 0 {
		opts = append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offs}))
	} else {
		opts = append(opts, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	}
	cl, err := kgo.NewClient(k.conn.Opts(opts...)...)
	if err != nil {
		return nil, fmt.Errorf("follow %s: %w", topic, err)
	}
	return &Tail{cl: cl, topic: topic}, nil
}

// Poll waits until records arrive or ctx ends, and returns them in
// partition order, each partition's in offset order, with the next offset
// to read of each partition it read (transaction markers count, though
// they are not returned). A cancelled ctx returns ctx's error.
func (t *Tail) Poll(ctx context.Context) ([]*Record, map[int32]int64, error) {
	fs := t.cl.PollFetches(ctx)
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	for _, fe := range fs.Errors() {
		if errors.Is(fe.Err, context.Canceled) {
			return nil, nil, context.Canceled
		}
		return nil, nil, fmt.Errorf("read %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
	}
	var recs []*Record
	next := map[int32]int64{}
	fs.EachRecord(func(r *kgo.Record) {
		next[r.Partition] = max(next[r.Partition], r.Offset+1)
		if !r.Attrs.IsControl() {
			recs = append(recs, r)
		}
	})
	return recs, next, nil
}

// Close stops following the topic and frees its connections.
func (t *Tail) Close() { t.cl.Close() }
