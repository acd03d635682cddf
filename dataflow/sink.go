package dataflow

import (
	"context"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/streamplan"
	"github.com/turbinesql/turbinesql/types"
)

// Sink writes output rows to the stream's topic as JSON objects named by
// the output schema. A row with a key goes where murmur2 puts it (as a
// Java producer would); a row without one is spread round robin. With
// MessageKey set, every row is keyed by that TEXT column's value (NULL:
// unkeyed), whatever key the row had.
//
// A pane (a row of a windowed aggregation: Batch.Panes) carries its
// identity, so that a downstream upsert or dedupe collapses a pane written
// twice (at-least-once) and an early fire with the final pane of its
// window: its headers name the stream, the window's start and end, and the
// group key (HeaderStream, HeaderWindowStart, HeaderWindowEnd, HeaderKey),
// whatever the select list outputs; its record key is the group key (as an
// upsert stream's), or for a keyless window the window's start, unless
// MessageKey says otherwise. Every pane of a key (of a keyless window's
// instance) is then on one partition, in the order written.
//
// An output record larger than the topic accepts follows the input
// source's on_error: skipped and counted, dead-lettered (cut to fit, with a
// header saying so), or failing the stream.
type Sink struct {
	Topic      string
	Partitions int
	Schema     types.Schema
	MessageKey string
	// OnError and DLQTopic are the input source's (fail for a stream's
	// output); DLQ knows the dead-letter topic's partition count.
	OnError  streamplan.OnError
	DLQTopic string
	DLQ      func(ctx context.Context, topic string) int
	// MaxBytes is the output topic's max.message.bytes (0: unknown): a
	// larger record is handled before it is sent, so it cannot take the
	// records batched with it down too.
	MaxBytes int

	env    *Env
	stream []byte // the stream's name, the HeaderStream of every pane
	mk     int    // index of MessageKey in Schema, -1: none
	rr     int
	out    prometheus.Counter // records out, looked up once
}

var _ Op = (*Sink)(nil)

func (s *Sink) Open(_ context.Context, env *Env) error {
	s.env = env
	s.stream = []byte(env.Name)
	s.out = env.Metrics.RecordsOut.WithLabelValues(env.Name)
	if s.OnError.Tolerant() {
		env.Metrics.DecodeErrors.WithLabelValues(env.Name, s.OnError.String()) // oversized rows, at 0 from the start
	}
	s.mk = -1
	if s.MessageKey != "" {
		s.mk = s.Schema.Index(s.MessageKey)
	}
	// Tasks start their round robin apart, so unkeyed output spreads.
	s.rr = int(env.Partition)
	return nil
}

func (s *Sink) Process(ctx context.Context, b *Batch) (*Batch, error) {
	var ids paneIDs
	if b.Panes != nil {
		ids = newPaneIDs(s.stream, len(b.Rows), b.Keys != nil)
	}
	for i, row := range b.Rows {
		rec := &kafkaio.Record{Topic: s.Topic, Value: exec.AppendJSONRow(nil, s.Schema, row)}
		var start []byte // a pane's window start as text
		if b.Panes != nil {
			var groupKey []byte
			if b.Keys != nil {
				groupKey = b.Keys[i]
			}
			rec.Headers, start = ids.headers(b.Panes[i], groupKey)
		}
		var key []byte
		hasKey := false
		switch {
		case s.mk >= 0:
			if v, ok := row[s.mk].(string); ok {
				key, hasKey = append([]byte{}, v...), true
			}
		case b.Keys != nil:
			key, hasKey = b.Keys[i], b.Keys[i] != nil
		case b.Panes != nil:
			// A keyless window's pane: the window is its whole identity.
			key, hasKey = start, true
		}
		if hasKey {
			rec.Key = key
			rec.Partition = state.PartitionFor(key, s.Partitions)
		} else {
			rec.Partition = int32(s.rr % s.Partitions)
			s.rr++
		}
		if size := len(rec.Key) + len(rec.Value) + headerBytes(rec.Headers) + recordOverhead; s.MaxBytes > 0 && size > s.MaxBytes {
			if !s.OnError.Tolerant() {
				return nil, fmt.Errorf("output record of %d bytes is larger than topic %s accepts (max.message.bytes %d): set on_error = 'skip' or 'dlq' on the source to pass over such rows",
					size, s.Topic, s.MaxBytes)
			}
			s.env.Counts.Out.Add(1)
			s.tooLarge(ctx, rec)
			continue
		}
		switch {
		case s.OnError.Tolerant():
			s.env.Out.ProduceOr(ctx, rec, func(r *kafkaio.Record) { s.tooLarge(ctx, r) })
		default:
			s.env.Out.Produce(ctx, rec)
		}
	}
	for _, key := range b.Tombstones {
		s.env.Out.Produce(ctx, &kafkaio.Record{Topic: s.Topic, Key: key, Partition: state.PartitionFor(key, s.Partitions)})
	}
	if n := len(b.Rows) + len(b.Tombstones); n > 0 {
		s.out.Add(float64(n))
		s.env.Counts.Out.Add(int64(n))
	}
	return nil, nil
}

// tooLarge handles an output record the topic refused as too large.
func (s *Sink) tooLarge(ctx context.Context, r *kafkaio.Record) {
	env := s.env
	size := len(r.Key) + len(r.Value)
	env.Log.Warn("output record larger than its topic accepts", "topic", r.Topic, "bytes", size, "on_error", s.OnError.String())
	env.Counts.Out.Add(-1) // counted when sent; it was not written
	if s.OnError == streamplan.OnErrorSkip {
		env.Metrics.DecodeErrors.WithLabelValues(env.Name, streamplan.OnErrorSkip.String()).Inc()
		env.Counts.Skipped.Add(1)
		return
	}
	n := int32(s.DLQ(ctx, s.DLQTopic))
	dl := &kafkaio.Record{Topic: s.DLQTopic, Key: r.Key, Value: r.Value, Partition: r.Partition % n,
		Headers: []kafkaio.Header{
			{Key: "turbine.error", Value: []byte(fmt.Sprintf("output record of %d bytes is larger than topic %s accepts", size, r.Topic))},
			{Key: HeaderStream, Value: s.stream},
			{Key: "turbine.output.topic", Value: []byte(r.Topic)},
		}}
	env.Out.ProduceOr(ctx, dl, func(d *kafkaio.Record) { env.Out.Produce(ctx, Truncated(d)) })
	env.Metrics.DecodeErrors.WithLabelValues(env.Name, streamplan.OnErrorDLQ.String()).Inc()
	env.Counts.DLQ.Add(1)
}

// The headers of every pane record: its identity. Values are text: the
// stream's name; the window's start and end in epoch milliseconds, in
// decimal; the group key as the record key of an upsert stream has it
// (one key column: its text, integers in decimal, NULL a null value;
// several: a JSON array). A keyless window's panes have no HeaderKey.
const (
	HeaderStream      = "turbine.stream"
	HeaderWindowStart = "turbine.window.start"
	HeaderWindowEnd   = "turbine.window.end"
	HeaderKey         = "turbine.key"
)

// paneIDs builds the identity headers of a batch's panes out of two
// allocations for the whole batch rather than several per record (the
// records keep pointing into them until Kafka acknowledges them, so each
// batch has its own).
type paneIDs struct {
	stream []byte
	keyed  bool
	hdrs   []kafkaio.Header
	nums   []byte
}

func newPaneIDs(stream []byte, n int, keyed bool) paneIDs {
	per := 3
	if keyed {
		per++
	}
	// Two int64s in decimal: at most 20 bytes each.
	return paneIDs{stream: stream, keyed: keyed, hdrs: make([]kafkaio.Header, 0, per*n), nums: make([]byte, 0, 40*n)}
}

// headers are pane p's headers (groupKey: its group key, nil when NULL),
// and the text of its window start.
func (ids *paneIDs) headers(p Pane, groupKey []byte) ([]kafkaio.Header, []byte) {
	from := len(ids.hdrs)
	start := ids.number(p.Start)
	ids.hdrs = append(ids.hdrs,
		kafkaio.Header{Key: HeaderStream, Value: ids.stream},
		kafkaio.Header{Key: HeaderWindowStart, Value: start},
		kafkaio.Header{Key: HeaderWindowEnd, Value: ids.number(p.End)})
	if ids.keyed {
		ids.hdrs = append(ids.hdrs, kafkaio.Header{Key: HeaderKey, Value: groupKey})
	}
	return ids.hdrs[from:len(ids.hdrs):len(ids.hdrs)], start
}

// number is ms in decimal, in the batch's text.
func (ids *paneIDs) number(ms int64) []byte {
	from := len(ids.nums)
	ids.nums = strconv.AppendInt(ids.nums, ms, 10)
	return ids.nums[from:len(ids.nums):len(ids.nums)]
}

// headerBytes is what hs add to a record.
func headerBytes(hs []kafkaio.Header) int {
	n := 0
	for _, h := range hs {
		n += len(h.Key) + len(h.Value) + 2 // and their lengths' varints, at least a byte each
	}
	return n
}

// recordOverhead bounds what Kafka adds to a record's key and value in a
// batch of one (framing, varints, timestamp), for the size check.
const recordOverhead = 128

// TruncatedBytes is how much of a key and of a value a record cut to fit
// keeps.
const TruncatedBytes = 16 << 10

// Truncated is a copy of r cut to fit any topic: key and value keep their
// first TruncatedBytes, and turbine.truncated gives their original sizes.
func Truncated(r *kafkaio.Record) *kafkaio.Record {
	c := *r
	c.Headers = append(append([]kafkaio.Header{}, r.Headers...),
		kafkaio.Header{Key: "turbine.truncated", Value: []byte(fmt.Sprintf("key %d bytes, value %d bytes", len(r.Key), len(r.Value)))})
	if len(c.Key) > TruncatedBytes {
		c.Key = c.Key[:TruncatedBytes]
	}
	if len(c.Value) > TruncatedBytes {
		c.Value = c.Value[:TruncatedBytes]
	}
	return &c
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
