package dataflow

import (
	"context"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/sql"
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
	// TimeRequired: a row whose column TimeRequiredIdx (the window's time)
	// is NULL has no window; it goes through the input's on_error policy
	// (22004) instead of being counted as late.
	TimeRequired    bool
	TimeRequiredIdx int

	dec *exec.JSONDecoder
	env *Env
	// claims: per partition, the lowest offset whose dead letter this
	// exactly-once task claimed in its open transaction.
	claims   map[int32]int64
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
		if err := s.onError(ctx, in.Partition, recs, derrs, s.env.Metrics.DecodeErrors, "cannot decode record"); err != nil {
			return nil, err
		}
	}
	b := exec.BatchOf(rec, s.Input.Schema)
	FillKafkaTime(s.Input, b, recs, decoded)
	if s.TimeRequired {
		var nerrs []exec.DecodeError
		if b, decoded, nerrs = s.dropNullTime(b, decoded); len(nerrs) > 0 {
			if err := s.onError(ctx, in.Partition, recs, nerrs, s.env.Metrics.NullEventTime, "record without an event time"); err != nil {
				return nil, err
			}
		}
	}
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

// onError applies the input's on_error policy to records it cannot use
// (undecodable, or without an event time): skip (counted, logged), dlq
// (the original key, bytes and timestamp go to the dead-letter topic with
// headers saying why and from where) or fail (an error naming topic,
// partition and offset). Every input record is either processed or
// accounted for; counter counts them by policy.
func (s *Source) onError(ctx context.Context, p int32, recs []*kafkaio.Record, derrs []exec.DecodeError, counter *prometheus.CounterVec, what string) error {
	policy, dlq := "fail", ""
	if src := s.Input.Source; src != nil {
		policy, dlq = src.OnError, src.DLQTopic
	}
	env := s.env
	switch policy {
	case "skip":
		counter.WithLabelValues(env.Name, policy).Add(float64(len(derrs)))
		for _, de := range derrs {
			env.Log.Warn("skipped "+what, "topic", s.Input.Topic, "partition", p, "offset", recs[de.Index].Offset, "err", de.Err)
		}
		env.Stats.Skipped.Add(int64(len(derrs)))
		return nil
	case "dlq":
		n := int32(s.DLQ(ctx, dlq))
		for _, de := range derrs {
			src := recs[de.Index]
			if s.Letters != nil {
				if !s.Letters.Claim(s.Input.Source.Name, src.Partition, src.Offset) {
					continue // another stage reading the source wrote it
				}
				if env.ExactlyOnce {
					s.provisional(src.Partition, src.Offset)
				}
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
		counter.WithLabelValues(env.Name, policy).Add(float64(len(derrs)))
		env.Stats.DLQ.Add(int64(len(derrs)))
		return nil
	}
	de := derrs[0]
	if s.Input.Stream != nil {
		// A stream's output has no on_error of its own to name.
		return fmt.Errorf("%s at %s/%d offset %d: %w (the record is in the output topic of stream %q but does not have its columns: something other than the stream wrote it there)",
			what, s.Input.Topic, p, recs[de.Index].Offset, de.Err, s.Input.Name)
	}
	return fmt.Errorf("%s at %s/%d offset %d: %w (set on_error = 'skip' or 'dlq' on source %s to keep going)",
		what, s.Input.Topic, p, recs[de.Index].Offset, de.Err, s.Input.Name)
}

// dropNullTime takes the rows without an event time out of b (and their
// record indexes out of decoded), returning them as errors of their records.
func (s *Source) dropNullTime(b *exec.Batch, decoded []int) (*exec.Batch, []int, []exec.DecodeError) {
	ts := b.Cols[s.TimeRequiredIdx]
	if ts.Null == nil {
		return b, decoded, nil
	}
	var errs []exec.DecodeError
	keep := make([]bool, b.N)
	kept := 0
	for i := 0; i < b.N; i++ {
		if ts.IsNull(i) {
			errs = append(errs, exec.DecodeError{Index: decoded[i], Err: s.nullTimeErr()})
			continue
		}
		keep[i] = true
		decoded[kept] = decoded[i]
		kept++
	}
	if errs == nil {
		return b, decoded, nil
	}
	return b.Select(keep, kept), decoded[:kept], errs
}

func (s *Source) nullTimeErr() error {
	col := s.Input.Schema[s.TimeRequiredIdx].Name
	return sql.Errorf(CodeNullValueNotAllowed, "null value in event-time column %s: the row has no window", col)
}

// CodeNullValueNotAllowed is SQLSTATE 22004, null_value_not_allowed.
const CodeNullValueNotAllowed = "22004"

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

// provisional remembers a dead letter claimed in the open transaction: it
// is written only if the transaction commits.
func (s *Source) provisional(p int32, off int64) {
	if s.claims == nil {
		s.claims = map[int32]int64{}
	}
	if old, ok := s.claims[p]; !ok || off < old {
		s.claims[p] = off
	}
}

var _ TxnAware = (*Source)(nil)

// TxnCommitted: the dead letters claimed are in the topic.
func (s *Source) TxnCommitted() { clear(s.claims) }

// TxnAborted gives the dead letters claimed in the aborted transaction
// back, so that whoever reads those records next writes them.
func (s *Source) TxnAborted() {
	for p, off := range s.claims {
		s.Letters.Release(s.Input.Source.Name, p, off)
	}
	clear(s.claims)
}
