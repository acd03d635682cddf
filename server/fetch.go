package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/window"
)

// pollInto polls cl for batches of at most max records and hands them to
// out until ctx ends.
func pollInto(ctx context.Context, cl *kgo.Client, max int, out chan<- kgo.Fetches) {
	for {
		fs := cl.PollRecords(ctx, max)
		if ctx.Err() != nil {
			return
		}
		select {
		case out <- fs:
		case <-ctx.Done():
			return
		}
	}
}

// eachNewPartition hands fn, partition by partition, the records of a
// fetch not yet applied (at or after each partition's Next in wms), after
// noting the log end the fetch reported. It returns the partitions that
// had any. A fetch error fails it, unless the poll was cancelled (then it
// does nothing).
func eachNewPartition(fs kgo.Fetches, wms *window.Watermarks, fn func(p int32, recs []*kgo.Record) error) (map[int32]bool, error) {
	for _, fe := range fs.Errors() {
		if errors.Is(fe.Err, context.Canceled) {
			return nil, nil
		}
		return nil, fmt.Errorf("read %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
	}
	touched := map[int32]bool{}
	var err error
	fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		ps := wms.Part(fp.Partition)
		if err != nil || ps == nil {
			return
		}
		wms.SawEnd(fp.Partition, fp.HighWatermark)
		recs := fp.Records
		for len(recs) > 0 && recs[0].Offset < ps.Next { // already applied
			recs = recs[1:]
		}
		if len(recs) == 0 {
			return
		}
		touched[fp.Partition] = true
		err = fn(fp.Partition, recs)
	})
	return touched, err
}
