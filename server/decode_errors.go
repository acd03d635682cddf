package server

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/exec"
)

// decodePolicy is who decodes (a stream, or a repartition hop: its name
// labels metrics and dead letters) and what it reads.
type decodePolicy struct {
	name  string
	input *catalog.Relation
	log   *slog.Logger
}

// handleDecodeErrors applies the input's on_error policy to undecodable
// records: skip (counted, logged), dlq (the original key, bytes and
// timestamp go to the dead-letter topic with headers saying why and from
// where) or fail (an error naming topic, partition and offset). Every
// input record is either processed or accounted for.
func handleDecodeErrors(ctx context.Context, srv *Server, pol decodePolicy, p int32, recs []*kgo.Record, derrs []exec.DecodeError) (skipped, dead int, err error) {
	policy, dlq := "fail", ""
	if src := pol.input.Source; src != nil {
		policy, dlq = src.OnError, src.DLQTopic
	}
	switch policy {
	case "skip":
		srv.metrics.decodeErrors.WithLabelValues(pol.name, policy).Add(float64(len(derrs)))
		for _, de := range derrs {
			pol.log.Warn("skipped undecodable record", "topic", pol.input.Topic, "partition", p, "offset", recs[de.Index].Offset, "err", de.Err)
		}
		return len(derrs), 0, nil
	case "dlq":
		out := make([]*kgo.Record, len(derrs))
		n := int32(srv.dlqPartitions(ctx, dlq))
		for i, de := range derrs {
			src := recs[de.Index]
			out[i] = &kgo.Record{
				Topic: dlq, Key: src.Key, Value: src.Value, Timestamp: src.Timestamp, Partition: src.Partition % n,
				Headers: []kgo.RecordHeader{
					{Key: "turbine.error", Value: []byte(de.Err.Error())},
					{Key: "turbine.source.topic", Value: []byte(src.Topic)},
					{Key: "turbine.source.partition", Value: []byte(strconv.Itoa(int(src.Partition)))},
					{Key: "turbine.source.offset", Value: []byte(strconv.FormatInt(src.Offset, 10))},
					{Key: "turbine.stream", Value: []byte(pol.name)},
				},
			}
		}
		if err := srv.kafka.produceSync(ctx, out); err != nil {
			return 0, 0, fmt.Errorf("write to dead-letter topic %s: %w", dlq, err)
		}
		srv.metrics.decodeErrors.WithLabelValues(pol.name, policy).Add(float64(len(derrs)))
		return 0, len(derrs), nil
	}
	de := derrs[0]
	return 0, 0, fmt.Errorf("cannot decode record at %s/%d offset %d: %w (set on_error = 'skip' or 'dlq' on source %s to keep going)",
		pol.input.Topic, p, recs[de.Index].Offset, de.Err, pol.input.Name)
}
