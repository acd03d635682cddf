package kafkaio

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
)

// StartOffsets returns the log start offset of each partition of topic:
// the first offset a reader can still fetch.
func (k *Client) StartOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	lo, err := k.adm.ListStartOffsets(ctx, topic)
	return listedOffsets(lo, err, topic, "start offset")
}

// DeleteRecordsBefore makes the records of topic below to[p] unreadable
// (Kafka's DeleteRecords: the partition's log start offset moves up to
// it, and the broker deletes the segments behind it). It returns each
// partition's new start offset; a partition the broker refused is left
// out and reported in the error.
func (k *Client) DeleteRecordsBefore(ctx context.Context, topic string, to map[int32]int64) (map[int32]int64, error) {
	if len(to) == 0 {
		return map[int32]int64{}, nil
	}
	os := kadm.Offsets{}
	for p, o := range to {
		os.Add(kadm.Offset{Topic: topic, Partition: p, At: o})
	}
	resp, err := k.adm.DeleteRecords(ctx, os)
	if err != nil {
		return nil, fmt.Errorf("delete records of %s: %w", topic, err)
	}
	out := map[int32]int64{}
	var ferr error
	resp.Each(func(r kadm.DeleteRecordsResponse) {
		if r.Err != nil {
			ferr = fmt.Errorf("delete records of %s/%d: %w", topic, r.Partition, r.Err)
			return
		}
		out[r.Partition] = r.LowWatermark
	})
	return out, ferr
}
