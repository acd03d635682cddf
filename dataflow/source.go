package dataflow

import (
	"context"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/types"
)

// Source is the prelude of every task that reads rows: it decodes a
// batch of records into columns, applies the input's on_error policy to
// what does not decode (skip, dead-letter, or fail naming topic,
// partition and offset), fills event time from the Kafka timestamp when
// the source asks for it, feeds the source's statistics, adds the
// input-position column FIRST_VALUE/LAST_VALUE need, and notes the
// batch's largest event time.
type Source struct {
	Input *catalog.Relation
	// TimeIdx is the event-time column (-1: none).
	TimeIdx int
	// NeedsSeq adds planner.SeqColumn.
	NeedsSeq bool
	// Observe feeds the source's statistics (nil: not sampled here).
	Observe func(*exec.Batch)
	// DLQ knows the partition count of a dead-letter topic.
	DLQ func(ctx context.Context, topic string) int
	// Letters, when set, makes each dead letter written once among the
	// stages reading the source.
	Letters *DeadLetters
	// CountIn counts the records into the stream's records_in.
	CountIn bool

	dec      *exec.JSONDecoder
	env      *Env
	countsIn prometheus.Counter // this task's records in, looked up once
}

var _ Op = (*Source)(nil)

// NewDecoder decodes records of in. With timestamp = 'kafka' the
// watermark column is not read from the JSON: the Kafka timestamp fills it.
func NewDecoder(in *catalog.Relation) *exec.JSONDecoder {
	d := exec.NewJSONDecoder(in.Schema, nil)
	if src := in.Source; src != nil && src.KafkaTimestamp && src.Watermark != nil {
		d.Skip(in.Schema.Index(src.Watermark.Column))
	}
	return d
}

func (s *Source) Open(_ context.Context, env *Env) error {
	s.env = env
	s.dec = NewDecoder(s.Input)
	s.countsIn = env.Metrics.RecordsIn.WithLabelValues(env.Name, strconv.Itoa(int(env.Partition)))
	return nil
}

func (s *Source) Process(ctx context.Context, in *Batch) (*Batch, error) {
	recs := in.Recs
	values := make([][]byte, len(recs))
	for i, r := range recs {
		values[i] = r.Value
	}
	rec, decoded, derrs := s.dec.Decode(values)
	defer rec.Release()
	if len(derrs) > 0 {
		if err := s.undecodable(ctx, in.Partition, recs, derrs); err != nil {
			return nil, err
		}
	}
	b := exec.BatchOf(rec, s.Input.Schema)
	FillKafkaTime(s.Input, b, recs, decoded)
	if s.Observe != nil {
		s.Observe(b)
	}
	if s.NeedsSeq {
		AppendSeq(b, recs, decoded)
	}
	out := &Batch{Partition: in.Partition, Data: b, Recs: recs, Src: decoded}
	if s.TimeIdx >= 0 {
		ts := b.Cols[s.TimeIdx]
		for i := 0; i < b.N; i++ {
			if !ts.IsNull(i) && (!out.HasTime || ts.I[i] > out.MaxTime) {
				out.MaxTime, out.HasTime = ts.I[i], true
			}
		}
	}
	if s.CountIn {
		s.countsIn.Add(float64(len(recs)))
		s.env.Stats.In.Add(int64(len(recs)))
	}
	return out, nil
}

func (s *Source) OnWatermark(context.Context, Watermark) (*Batch, error) { return nil, nil }
func (s *Source) Commit(context.Context, *Commit) error                  { return nil }
func (s *Source) Close()                                                 {}

// undecodable applies the input's on_error policy to undecodable records:
// skip (counted, logged), dlq (the original key, bytes and timestamp go to
// the dead-letter topic with headers saying why and from where) or fail
// (an error naming topic, partition and offset). Every input record is
// either processed or accounted for.
func (s *Source) undecodable(ctx context.Context, p int32, recs []*kafkaio.Record, derrs []exec.DecodeError) error {
	policy, dlq := "fail", ""
	if src := s.Input.Source; src != nil {
		policy, dlq = src.OnError, src.DLQTopic
	}
	env := s.env
	switch policy {
	case "skip":
		env.Metrics.DecodeErrors.WithLabelValues(env.Name, policy).Add(float64(len(derrs)))
		for _, de := range derrs {
			env.Log.Warn("skipped undecodable record", "topic", s.Input.Topic, "partition", p, "offset", recs[de.Index].Offset, "err", de.Err)
		}
		env.Stats.Skipped.Add(int64(len(derrs)))
		return nil
	case "dlq":
		n := int32(s.DLQ(ctx, dlq))
		for _, de := range derrs {
			src := recs[de.Index]
			if s.Letters != nil && !s.Letters.Claim(s.Input.Source.Name, src.Partition, src.Offset) {
				continue // another stage reading the source wrote it
			}
			env.Out.ProduceOr(ctx, &kafkaio.Record{
				Topic: dlq, Key: src.Key, Value: src.Value, Timestamp: src.Timestamp, Partition: src.Partition % n,
				Headers: []kafkaio.Header{
					{Key: "turbine.error", Value: []byte(de.Err.Error())},
					{Key: "turbine.source.topic", Value: []byte(src.Topic)},
					{Key: "turbine.source.partition", Value: []byte(strconv.Itoa(int(src.Partition)))},
					{Key: "turbine.source.offset", Value: []byte(strconv.FormatInt(src.Offset, 10))},
					{Key: "turbine.stream", Value: []byte(env.Name)},
					{Key: "turbine.source", Value: []byte(s.Input.Source.Name)},
				},
			}, func(r *kafkaio.Record) { env.Out.Produce(ctx, Truncated(r)) })
		}
		env.Metrics.DecodeErrors.WithLabelValues(env.Name, policy).Add(float64(len(derrs)))
		env.Stats.DLQ.Add(int64(len(derrs)))
		return nil
	}
	de := derrs[0]
	return fmt.Errorf("cannot decode record at %s/%d offset %d: %w (set on_error = 'skip' or 'dlq' on source %s to keep going)",
		s.Input.Topic, p, recs[de.Index].Offset, de.Err, s.Input.Name)
}

// FillKafkaTime sets the watermark column of a timestamp = 'kafka' source
// to each record's Kafka timestamp. Row i of b came from recs[decoded[i]].
func FillKafkaTime(in *catalog.Relation, b *exec.Batch, recs []*kafkaio.Record, decoded []int) {
	src := in.Source
	if src == nil || !src.KafkaTimestamp || src.Watermark == nil {
		return
	}
	ts := b.Cols[in.Schema.Index(src.Watermark.Column)]
	ts.Null = nil
	for i, idx := range decoded[:b.N] {
		ts.I[i] = recs[idx].Timestamp.UnixMilli()
	}
}

// AppendSeq adds planner.SeqColumn to b: each row's input position,
// (offset << 10) | partition, so FIRST_VALUE and LAST_VALUE break ties of
// event time by position (partitions number at most 960 < 1024). Row i of
// b came from recs[decoded[i]].
func AppendSeq(b *exec.Batch, recs []*kafkaio.Record, decoded []int) {
	seq := &exec.Vec{T: types.Int, N: b.N, I: make([]int64, b.N)}
	for i, idx := range decoded[:b.N] {
		r := recs[idx]
		seq.I[i] = r.Offset<<10 | int64(r.Partition)
	}
	b.Cols = append(b.Cols, seq)
}
