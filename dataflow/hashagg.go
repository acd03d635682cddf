package dataflow

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/turbinesql/turbinesql/agg"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/types"
)

// NewAggregator makes the hash aggregation of a plan, its groups keyed for
// an input of partitions partitions (0: 960 key groups).
func NewAggregator(p *planner.Plan, latenessMs int64, partitions int) (*exec.Aggregator, error) {
	cfg := exec.AggConfig{Filter: p.Filter, Keys: p.Keys, PK: p.PartitionKey, TimeIdx: -1, Lateness: latenessMs,
		Specs: make([]agg.Spec, len(p.Aggs)), Args: make([][]exec.Expr, len(p.Aggs)), Partitions: partitions}
	for i, a := range p.Aggs {
		cfg.Specs[i] = a.Spec
		cfg.Args[i] = a.Args
	}
	if p.Window != nil {
		spec := p.Window.Spec
		cfg.TimeIdx, cfg.Window = p.Window.TimeIdx, &spec
	}
	return exec.NewAggregator(cfg)
}

// HashAgg is the keyed aggregation of a stream: windowed (TUMBLE, HOP,
// SESSION), or without a window (an upsert stream). It folds rows into
// the task's groups; on the task's watermark it emits the windows it
// closes (and, with EMIT EVERY, early fires of the open ones), or for an
// upsert stream every group changed since the last commit, keyed by the
// group key. Rows every window of which has closed are late: they go to
// the late-data topic when the stream has one, else are dropped, and are
// counted either way.
//
// Its state is the task's groups, restored at Open from the key groups the
// task owns; its close watermark is the task's (Commit.Closed).
type HashAgg struct {
	Plan          *planner.Plan
	LatenessMs    int64
	LateDataTopic string
	// EmitEvery is the EMIT EVERY interval (0: none).
	EmitEvery time.Duration
	// DLQ knows the partition count of the late-data topic.
	DLQ func(ctx context.Context, topic string) int
	// Merge: the input is partial accumulators shipped by a combine's
	// pre-aggregation (records: key = group key, value = window + state).
	Merge bool

	agg        *exec.Aggregator
	env        *Env
	wm         int64 // the watermark windows are closed up to
	hasWM      bool
	recovering bool // the first close after Open: windows due at start
	lastEarly  time.Time
}

var _ Op = (*HashAgg)(nil)

func (h *HashAgg) Open(_ context.Context, env *Env) error {
	h.env = env
	a, err := NewAggregator(h.Plan, h.LatenessMs, env.Partitions)
	if err != nil {
		return err
	}
	h.agg = a
	if m := env.Restored; m.HasClosed {
		h.wm, h.hasWM = m.Closed, true
		h.recovering = true
	}
	h.lastEarly = env.Now()
	return env.Store.AccsOfGroups(env.State, env.Groups(), func(kg uint16, key []byte, window int64, val []byte) error {
		if err := h.agg.Restore(exec.StateRef{KG: kg, Key: key, Window: window}, val); err != nil {
			return fmt.Errorf("restore state of %s: %w", env.State, err)
		}
		return nil
	})
}

// Aggregator exposes the operator's groups (tests).
func (h *HashAgg) Aggregator() *exec.Aggregator { return h.agg }

func (h *HashAgg) Process(ctx context.Context, b *Batch) (*Batch, error) {
	if h.Merge {
		return nil, h.mergePartials(b)
	}
	late, err := h.agg.Consume(b.Data, h.wm, h.hasWM)
	if err != nil {
		return nil, fmt.Errorf("%s/%d offsets %d-%d: %w", b.Recs[0].Topic, b.Partition, b.Recs[0].Offset, b.Recs[len(b.Recs)-1].Offset, err)
	}
	if len(late) > 0 {
		h.routeLate(ctx, b, late)
	}
	return nil, nil
}

// mergePartials folds shipped partial accumulators into their (window,
// key) groups. A partial for a window already closed (a redelivery after a
// crash, under at-least-once) is dropped and counted, never merged into a
// second pane.
func (h *HashAgg) mergePartials(b *Batch) error {
	size := h.Plan.Window.Spec.Size
	for _, rec := range b.Recs {
		w, enc, err := DecodePartial(rec.Value)
		if err != nil {
			return fmt.Errorf("%s/%d offset %d: %w", rec.Topic, rec.Partition, rec.Offset, err)
		}
		if h.hasWM && w+size+h.agg.Lateness <= h.wm {
			h.env.Metrics.CombineLatePartials.WithLabelValues(h.env.Name).Inc()
			h.env.Stats.Late.Add(1)
			continue
		}
		if err := h.agg.MergePartial(w, rec.Key, enc); err != nil {
			return fmt.Errorf("%s/%d offset %d: %w", rec.Topic, rec.Partition, rec.Offset, err)
		}
	}
	return nil
}

// routeLate accounts for rows every window of which had closed: with a
// late_data_topic they are written there as they came in (key, bytes,
// broker timestamp), with headers naming the stream, the windows and where
// the record came from; otherwise they are dropped. Either way they are
// counted, so nothing late disappears silently.
func (h *HashAgg) routeLate(ctx context.Context, b *Batch, late []int) {
	env := h.env
	action := "dropped"
	if topic := h.LateDataTopic; topic != "" {
		action = "routed"
		n := int32(h.DLQ(ctx, topic))
		for _, row := range late {
			src := b.Recs[b.Src[row]]
			env.Out.ProduceOr(ctx, &kafkaio.Record{
				Topic: topic, Key: src.Key, Value: src.Value, Timestamp: src.Timestamp, Partition: src.Partition % n,
				Headers: []kafkaio.Header{
					{Key: "turbine.stream", Value: []byte(env.Name)},
					{Key: "turbine.window", Value: []byte(h.lateWindows(b.Data, row))},
					{Key: "turbine.watermark", Value: []byte(exec.FormatTimestamp(types.MillisTime(h.wm)))},
					{Key: "turbine.source.topic", Value: []byte(src.Topic)},
					{Key: "turbine.source.partition", Value: []byte(strconv.Itoa(int(src.Partition)))},
					{Key: "turbine.source.offset", Value: []byte(strconv.FormatInt(src.Offset, 10))},
				},
			}, func(r *kafkaio.Record) { env.Out.Produce(ctx, Truncated(r)) })
		}
	}
	env.Metrics.LateRows.WithLabelValues(env.Name, action).Add(float64(len(late)))
	env.Stats.Late.Add(int64(len(late)))
}

// lateWindows names the windows a late row fell in, "start/end" each,
// comma-separated; "none (NULL event time)" when it had no event time.
func (h *HashAgg) lateWindows(b *exec.Batch, row int) string {
	ts := b.Cols[h.Plan.Window.TimeIdx]
	if ts.IsNull(row) {
		return "none (NULL event time)"
	}
	spec := h.Plan.Window.Spec
	if h.Plan.Window.Kind == "SESSION" {
		t := ts.I[row]
		return "session " + exec.FormatTimestamp(types.MillisTime(t)) + "/" + exec.FormatTimestamp(types.MillisTime(t+spec.Gap))
	}
	var parts []string
	for _, w := range spec.WindowsOf(ts.I[row]) {
		parts = append(parts, exec.FormatTimestamp(types.MillisTime(w))+"/"+exec.FormatTimestamp(types.MillisTime(w+spec.Size)))
	}
	return strings.Join(parts, ",")
}

// OnWatermark closes the windows the watermark passes (an upsert stream
// emits its changed groups instead), then fires the open windows early when
// EMIT EVERY is due.
func (h *HashAgg) OnWatermark(_ context.Context, wm Watermark) (*Batch, error) {
	if h.Plan.Window == nil {
		b, keys, err := h.changedGroups()
		if err != nil || b == nil {
			return nil, err
		}
		return &Batch{Partition: h.env.Partition, Data: b, Keys: keys, Final: true}, nil
	}
	var out chain
	if wm.Has && (!h.hasWM || wm.WM > h.wm || h.recovering) {
		prev, hadPrev := h.wm, h.hasWM
		if !h.hasWM || wm.WM > h.wm {
			h.wm, h.hasWM = wm.WM, true
		}
		closed, recovered, err := h.agg.CloseDue(prev, hadPrev, h.wm, h.recovering)
		if err != nil {
			return nil, err
		}
		if recovered > 0 {
			// Windows the watermark at the last commit had already passed:
			// their timers came due while the stream was down.
			h.env.Metrics.RecoveredTimers.WithLabelValues(h.env.Name).Add(float64(recovered))
			h.env.Log.Info("closed windows already due at start", "partition", h.env.Partition, "windows", recovered)
		}
		for _, b := range closed {
			out.add(&Batch{Partition: h.env.Partition, Data: b, Final: true})
		}
	}
	h.recovering = false
	if h.EmitEvery > 0 && wm.Now.Sub(h.lastEarly) >= h.EmitEvery {
		h.lastEarly = wm.Now
		open, err := h.agg.EmitOpen(h.wm, h.hasWM)
		if err != nil {
			return nil, err
		}
		for _, b := range open {
			out.add(&Batch{Partition: h.env.Partition, Data: b, Final: false})
		}
	}
	return out.head, nil
}

// changedGroups builds the rows of the groups changed since the last
// commit of an unwindowed aggregation, with their group keys as Kafka keys
// (the key's text for one key column, integers in decimal; a JSON array
// for several; NULL: unkeyed).
func (h *HashAgg) changedGroups() (*exec.Batch, [][]byte, error) {
	slots := h.agg.Table.PeekDirty()
	if len(slots) == 0 {
		return nil, nil, nil
	}
	b, err := h.agg.EmitGroups(slots)
	if err != nil {
		return nil, nil, err
	}
	nk := len(h.Plan.Keys)
	keys := make([][]byte, b.N)
	for i := range keys {
		if nk == 1 {
			keys[i] = exec.PartitionKeyText(b.Cols[0], i, nil)
			if keys[i] == nil && !b.Cols[0].IsNull(i) {
				keys[i] = []byte{}
			}
			continue
		}
		vals := make([]any, nk)
		for j := range vals {
			vals[j] = b.Cols[j].Value(i)
		}
		keys[i] = exec.AppendJSONArray(nil, vals)
	}
	return b, keys, nil
}

// Commit deletes the slices no open window needs (those written before;
// one that opened and closed since the last commit was never written),
// then writes the changed groups and the close watermark.
func (h *HashAgg) Commit(_ context.Context, c *Commit) error {
	if h.hasWM {
		for _, ref := range h.agg.Expire(h.wm) {
			if err := c.State.DeleteAcc(ref.KG, ref.Key, ref.Window); err != nil {
				return err
			}
		}
		c.Closed, c.HasClosed = h.wm, true
	}
	if err := h.agg.Changes(func(ref exec.StateRef, val []byte) error {
		return c.State.PutAcc(ref.KG, ref.Key, ref.Window, val)
	}, func(ref exec.StateRef) error {
		return c.State.DeleteAcc(ref.KG, ref.Key, ref.Window)
	}); err != nil {
		return err
	}
	h.env.Metrics.OpenGroups.WithLabelValues(h.env.Name, strconv.Itoa(int(h.env.Partition))).Set(float64(h.agg.Table.Len()))
	return nil
}

func (h *HashAgg) Close() {}

// Due asks for a watermark call when an early fire is due.
func (h *HashAgg) Due(now time.Time) bool {
	return h.EmitEvery > 0 && h.Plan.Window != nil && now.Sub(h.lastEarly) >= h.EmitEvery
}

// chain builds a list of batches.
type chain struct{ head, tail *Batch }

func (c *chain) add(b *Batch) {
	if c.head == nil {
		c.head, c.tail = b, b
		return
	}
	c.tail.Next = b
	c.tail = b
}
