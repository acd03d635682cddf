package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// PartitionFollower reads a changing set of partitions of one topic as
// they are committed (read_committed: records of open transactions wait,
// aborted ones never show), each from an offset of the caller's choice.
// A standby replica follows the changelog partitions it keeps warm with
// one.
type PartitionFollower struct {
	cl    *kgo.Client
	topic string

	mu      sync.Mutex
	reading map[int32]bool
}

// NewPartitionFollower follows no partition of topic yet (see Add).
func (k *Client) NewPartitionFollower(topic string) (*PartitionFollower, error) {
	cl, err := kgo.NewClient(k.conn.Opts(
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.FetchMaxWait(200*time.Millisecond),
		// An offset the log no longer has (the topic was recreated) is
		// an error for the caller, never a silent jump to the start.
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
	)...)
	if err != nil {
		return nil, fmt.Errorf("follow %s: %w", topic, err)
	}
	return &PartitionFollower{cl: cl, topic: topic, reading: map[int32]bool{}}, nil
}

// Add starts reading partition p at offset from.
func (f *PartitionFollower) Add(p int32, from int64) {
	f.mu.Lock()
	f.reading[p] = true
	f.mu.Unlock()
	f.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{f.topic: {p: kgo.NewOffset().At(from)}})
}

// Remove stops reading partition p; a Poll returns nothing more of it.
func (f *PartitionFollower) Remove(p int32) {
	f.mu.Lock()
	delete(f.reading, p)
	f.mu.Unlock()
	f.cl.RemoveConsumePartitions(map[string][]int32{f.topic: {p}})
}

// PartitionError is a failure to read one partition; the others go on.
type PartitionError struct {
	Partition int32
	Err       error
}

func (e *PartitionError) Error() string { return fmt.Sprintf("partition %d: %v", e.Partition, e.Err) }
func (e *PartitionError) Unwrap() error { return e.Err }

// Poll waits up to wait for records, and returns them with, per partition
// read, the next offset (transaction markers count, though they are not
// returned) and the partitions that failed (removed already).
func (f *PartitionFollower) Poll(ctx context.Context, wait time.Duration) (recs []*Record, next map[int32]int64, failed []*PartitionError, err error) {
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	fs := f.cl.PollFetches(pctx)
	if err := ctx.Err(); err != nil {
		return nil, nil, nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fe := range fs.Errors() {
		if errors.Is(fe.Err, context.DeadlineExceeded) || errors.Is(fe.Err, context.Canceled) {
			continue
		}
		if f.reading[fe.Partition] {
			failed = append(failed, &PartitionError{Partition: fe.Partition, Err: fe.Err})
		}
	}
	for _, pe := range failed {
		delete(f.reading, pe.Partition)
		f.cl.RemoveConsumePartitions(map[string][]int32{f.topic: {pe.Partition}})
	}
	next = map[int32]int64{}
	fs.EachRecord(func(r *kgo.Record) {
		if !f.reading[r.Partition] {
			return // fetched before Remove
		}
		next[r.Partition] = max(next[r.Partition], r.Offset+1)
		if !r.Attrs.IsControl() {
			recs = append(recs, r)
		}
	})
	return recs, next, failed, nil
}

// Close stops following.
func (f *PartitionFollower) Close() { f.cl.Close() }
