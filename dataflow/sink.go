package dataflow

import (
	"context"

	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/types"
)

// Sink writes output rows to the stream's topic as JSON objects named by
// the output schema. A row with a key goes where murmur2 puts it (as a
// Java producer would); a row without one is spread round robin. With
// MessageKey set, every row is keyed by that TEXT column's value (NULL:
// unkeyed), whatever key the row had.
type Sink struct {
	Topic      string
	Partitions int
	Schema     types.Schema
	MessageKey string

	env *Env
	mk  int // index of MessageKey in Schema, -1: none
	rr  int
}

var _ Op = (*Sink)(nil)

func (s *Sink) Open(_ context.Context, env *Env) error {
	s.env = env
	s.mk = -1
	if s.MessageKey != "" {
		s.mk = s.Schema.Index(s.MessageKey)
	}
	// Tasks start their round robin apart, so unkeyed output spreads.
	s.rr = int(env.Partition)
	return nil
}

func (s *Sink) Process(ctx context.Context, b *Batch) (*Batch, error) {
	for i, row := range b.Rows {
		rec := &kafkaio.Record{Topic: s.Topic, Value: exec.AppendJSONRow(nil, s.Schema, row)}
		var key []byte
		hasKey := false
		if s.mk >= 0 {
			if v, ok := row[s.mk].(string); ok {
				key, hasKey = append([]byte{}, v...), true
			}
		} else if b.Keys != nil && b.Keys[i] != nil {
			key, hasKey = b.Keys[i], true
		}
		if hasKey {
			rec.Key = key
			rec.Partition = state.PartitionFor(key, s.Partitions)
		} else {
			rec.Partition = int32(s.rr % s.Partitions)
			s.rr++
		}
		s.env.Out.Produce(ctx, rec)
	}
	if n := len(b.Rows); n > 0 {
		s.env.Metrics.RecordsOut.WithLabelValues(s.env.Name).Add(float64(n))
		s.env.Stats.Out.Add(int64(n))
	}
	return nil, nil
}

func (s *Sink) OnWatermark(context.Context, Watermark) (*Batch, error) { return nil, nil }
func (s *Sink) Commit(context.Context, *Commit) error                  { return nil }
func (s *Sink) Close()                                                 {}

// keyText is the Kafka key of a row's partition-key value (nil: NULL, an
// unkeyed record; an empty text is an empty key, as Java sends it).
func keyText(col *exec.Vec, i int) []byte {
	key := exec.PartitionKeyText(col, i, nil)
	if key == nil && !col.IsNull(i) {
		key = []byte{}
	}
	return key
}
