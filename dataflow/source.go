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
	"github.com/turbinesql/turbinesql/streamplan"
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
	// FromHop: the records are copies read from a repartition hop's
	// internal topic; a dead letter is the source's record they copy,
	// claimed and written by its position in the source topic.
	FromHop bool

	dec *exec.JSONDecoder
	env *Env
	// claims are the dead letters this task claimed since its last
	// commit: not in the topic for sure until the commit (Provisional).
	claims   []claim
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
	// The series onError counts into, at 0 from the start (a dashboard
	// sees them before the first bad record).
	if src := s.Input.Source; src != nil && src.OnError.Tolerant() {
		env.Metrics.DecodeErrors.WithLabelValues(env.Name, src.OnError.String())
		if s.TimeRequired {
			env.Metrics.NullEventTime.WithLabelValues(env.Name, src.OnError.String())
		}
	}
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
	b := exec.BatchOf(rec, s.Input.Schema)
	FillKafkaTime(s.Input, b, recs, decoded)
	var nerrs []exec.DecodeError
	if s.TimeRequired {
		b, decoded, nerrs = s.dropNullTime(b, decoded)
	}
	if len(derrs) > 0 || len(nerrs) > 0 {
		// One pass over the batch's bad records of every kind, in offset
		// order: the policy sees them as the partition holds them.
		if err := s.onError(ctx, recs, inOrder(derrs, nerrs)); err != nil {
			return nil, err
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
		if n := s.fresh(recs); n > 0 {
			s.countsIn.Add(float64(n))
			s.env.Counts.In.Add(int64(n))
		}
	}
	return out, nil
}

// fresh is how many of recs (in offset order) the task reads for the
// first time: those it reads again after a restart (Env.Reread) were
// counted when first read, and their counts committed.
func (s *Source) fresh(recs []*kafkaio.Record) int {
	i := 0
	for i < len(recs) && s.env.Reread(recs[i].Offset) {
		i++
	}
	return len(recs) - i
}

func (s *Source) OnWatermark(context.Context, Watermark) (*Batch, error) { return nil, nil }
func (s *Source) Commit(context.Context, *Commit) error                  { return nil }
func (s *Source) Close()                                                 {}

// badKind is why a record cannot be used.
type badKind uint8

const (
	badUndecodable badKind = iota // not JSON, or a field of the wrong type
	badNoEventTime                // decoded, but its window's time is NULL
)

// what names the kind in logs and errors.
func (k badKind) what() string {
	if k == badNoEventTime {
		return "record without an event time"
	}
	return "cannot decode record"
}

// counter is the kind's metric, labelled by stage and policy.
func (k badKind) counter(m *Metrics) *prometheus.CounterVec {
	if k == badNoEventTime {
		return m.NullEventTime
	}
	return m.DecodeErrors
}

// badRecord is one record of a batch that the task cannot use.
type badRecord struct {
	exec.DecodeError
	kind badKind
}

// inOrder merges the undecodable records and those without an event time
// (each list in record order) into one list in record order.
func inOrder(undecodable, noTime []exec.DecodeError) []badRecord {
	out := make([]badRecord, 0, len(undecodable)+len(noTime))
	for len(undecodable) > 0 || len(noTime) > 0 {
		if len(noTime) == 0 || len(undecodable) > 0 && undecodable[0].Index < noTime[0].Index {
			out = append(out, badRecord{undecodable[0], badUndecodable})
			undecodable = undecodable[1:]
		} else {
			out = append(out, badRecord{noTime[0], badNoEventTime})
			noTime = noTime[1:]
		}
	}
	return out
}

// onError applies the input's on_error policy to records it cannot use
// (undecodable, or without an event time), given in record order: skip
// (counted, logged), dlq (the original key, bytes and timestamp go to the
// dead-letter topic with headers saying why and from where) or fail (an
// error naming topic, partition and offset of the first). Every input
// record is either processed or accounted for; each kind's metric counts
// its records by policy.
//
// dead_lettered (Counters.DLQ) counts the records of the source this stage
// did not use because they belong in the dead-letter topic, whichever
// stage reading the source wrote them there (once: Letters).
func (s *Source) onError(ctx context.Context, recs []*kafkaio.Record, bad []badRecord) error {
	policy, dlq := streamplan.OnErrorFail, ""
	if src := s.Input.Source; src != nil {
		policy, dlq = src.OnError, src.DLQTopic
	}
	env := s.env
	// A record read again after a restart (Env.Reread) was counted when
	// first read: it is handled again, not counted again.
	count := func(br badRecord) bool {
		if env.Reread(recs[br.Index].Offset) {
			return false
		}
		br.kind.counter(env.Metrics).WithLabelValues(env.Name, policy.String()).Inc()
		return true
	}
	switch policy {
	case streamplan.OnErrorSkip:
		for _, br := range bad {
			if count(br) {
				env.Counts.Skipped.Add(1)
			}
			o, _ := s.origin(recs[br.Index])
			env.Log.Warn("skipped "+br.kind.what(), "topic", o.Topic, "partition", o.Partition, "offset", o.Offset, "err", br.Err)
		}
		return nil
	case streamplan.OnErrorDLQ:
		n := int32(s.DLQ(ctx, dlq))
		for _, br := range bad {
			if count(br) {
				env.Counts.DLQ.Add(1)
			}
			o, claimable := s.origin(recs[br.Index])
			if s.Letters != nil && claimable {
				if !s.Letters.Claim(Letters{s.Input.Source.Name, dlq}, o.Partition, o.Offset) {
					continue // another stage reading the source wrote it
				}
				s.claims = append(s.claims, claim{Letters{s.Input.Source.Name, dlq}, position{o.Partition, o.Offset}})
			}
			env.Out.ProduceOr(ctx, &kafkaio.Record{
				Topic: dlq, Key: o.Key, Value: o.Value, Timestamp: o.Timestamp, Partition: o.Partition % n,
				Headers: []kafkaio.Header{
					{Key: "turbine.error", Value: []byte(br.Err.Error())},
					{Key: "turbine.source.topic", Value: []byte(o.Topic)},
					{Key: "turbine.source.partition", Value: []byte(strconv.Itoa(int(o.Partition)))},
					{Key: "turbine.source.offset", Value: []byte(strconv.FormatInt(o.Offset, 10))},
					{Key: "turbine.stream", Value: []byte(env.Name)},
					{Key: "turbine.source", Value: []byte(s.Input.Source.Name)},
				},
			}, func(r *kafkaio.Record) { env.Out.Produce(ctx, Truncated(r)) })
		}
		return nil
	}
	br := bad[0]
	o, _ := s.origin(recs[br.Index])
	if s.Input.Stream != nil {
		// A stream's output has no on_error of its own to name.
		return fmt.Errorf("%s at %s/%d offset %d: %w (the record is in the output topic of stream %q but does not have its columns: something other than the stream wrote it there)",
			br.kind.what(), o.Topic, o.Partition, o.Offset, br.Err, s.Input.Name)
	}
	return fmt.Errorf("%s at %s/%d offset %d: %w (set on_error = 'skip' or 'dlq' on source %s to keep going)",
		br.kind.what(), o.Topic, o.Partition, o.Offset, br.Err, s.Input.Name)
}

// origin is the source's record that rec is: rec itself, or, for a copy
// read from a repartition hop (FromHop), the record of the source topic it
// copies, by the position the copy names (SourceHeader) and with the key
// the hop kept for it (KeyHeader). claimable is false for a copy that
// names no position (none can be claimed by its hop topic's position:
// that is not a position of the source).
func (s *Source) origin(rec *kafkaio.Record) (o kafkaio.Record, claimable bool) {
	if !s.FromHop {
		return *rec, true
	}
	o = kafkaio.Record{Topic: s.Input.Topic, Value: rec.Value, Timestamp: rec.Timestamp}
	v, ok := header(rec, SourceHeader)
	if !ok {
		o.Topic, o.Partition, o.Offset = rec.Topic, rec.Partition, rec.Offset
		return o, false
	}
	p, off, err := DecodeSource(v)
	if err != nil {
		o.Topic, o.Partition, o.Offset = rec.Topic, rec.Partition, rec.Offset
		return o, false
	}
	o.Partition, o.Offset = p, off
	if k, ok := header(rec, KeyHeader); ok {
		o.Key = append([]byte{}, k...)
	}
	return o, true
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

// position is a record's place in its topic.
type position struct {
	p   int32
	off int64
}

// claim is a dead letter claimed: where to, and which record.
type claim struct {
	to Letters
	position
}

var _ Provisional = (*Source)(nil)

// Confirmed: the dead letters claimed are in the topic.
func (s *Source) Confirmed() { s.claims = s.claims[:0] }

// Abandoned gives the dead letters claimed since the last commit back, so
// that whoever reads those records next (this task, reading them again)
// writes them.
func (s *Source) Abandoned() {
	for _, c := range s.claims {
		s.Letters.Release(c.to, c.p, c.off)
	}
	s.claims = s.claims[:0]
}
