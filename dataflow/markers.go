package dataflow

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/shuffle"
)

// Markers is the first operator of a task that reads a hop's internal
// topic: it takes the watermark markers out of the records, so the task's
// watermark is the slowest source partition's (Clock), and passes the data
// records on, each once: a record naming its source partition and offset
// (SourceHeader) at or below the highest it has applied from that source
// partition is a copy a hop wrote again after a crash, and is dropped.
// Copies of one source partition reach an internal partition in source
// order, so one offset per source partition, committed with the task's
// state, is enough.
type Markers struct {
	// Sources is how many source partitions report.
	Sources int
	// Lag, when set, reports the slowest source partition (combine's
	// turbine_combine_min_watermark_lag_seconds), shared by the stage's tasks.
	Lag *LagBoard

	prog    *shuffle.Progress
	env     *Env
	applied map[int32]int64 // per source partition: the highest offset applied
	changed bool
}

// appliedKey names the applied source offsets in the task's state.
const appliedKey = "applied-sources"

var _ Op = (*Markers)(nil)

// Clock is an operator that decides its task's watermark itself.
type Clock interface {
	Time() (int64, bool)
}

var _ Clock = (*Markers)(nil)

func (m *Markers) Open(_ context.Context, env *Env) error {
	m.env = env
	m.prog = shuffle.NewProgress(m.Sources)
	m.applied = map[int32]int64{}
	v, err := env.Store.TaskValue(env.State, env.Partition, appliedKey)
	if err != nil {
		return err
	}
	for len(v) > 0 {
		p, n := binary.Uvarint(v)
		off, k := binary.Uvarint(v[max(n, 0):])
		if n <= 0 || k <= 0 {
			return fmt.Errorf("state of %s/%d: corrupt applied offsets", env.State, env.Partition)
		}
		m.applied[int32(p)] = int64(off)
		v = v[n+k:]
	}
	return nil
}

func (m *Markers) Process(_ context.Context, b *Batch) (*Batch, error) {
	data := b.Recs[:0:0]
	for _, rec := range b.Recs {
		if v, ok := markerOf(rec); ok {
			mk, err := shuffle.DecodeMarker(v)
			if err != nil {
				return nil, fmt.Errorf("%s/%d offset %d: %w", rec.Topic, rec.Partition, rec.Offset, err)
			}
			m.prog.Observe(mk)
			continue
		}
		if v, ok := header(rec, SourceHeader); ok {
			p, off, err := DecodeSource(v)
			if err != nil {
				return nil, fmt.Errorf("%s/%d offset %d: %w", rec.Topic, rec.Partition, rec.Offset, err)
			}
			if last, seen := m.applied[p]; seen && off <= last {
				continue // written again by a hop that restarted
			}
			m.applied[p], m.changed = off, true
		}
		data = append(data, rec)
	}
	if m.Lag != nil {
		src, t, ok := m.prog.Slowest()
		m.Lag.report(m.env, src, t, ok)
	}
	if len(data) == 0 {
		return nil, nil
	}
	return &Batch{Partition: b.Partition, Recs: data}, nil
}

// Time is the slowest source partition's watermark.
func (m *Markers) Time() (int64, bool) { return m.prog.Time() }

func (m *Markers) OnWatermark(context.Context, Watermark) (*Batch, error) { return nil, nil }

// Commit records the applied source offsets with the task's state.
func (m *Markers) Commit(_ context.Context, c *Commit) error {
	if !m.changed {
		return nil
	}
	var v []byte
	for p, off := range m.applied {
		v = binary.AppendUvarint(v, uint64(p))
		v = binary.AppendUvarint(v, uint64(off))
	}
	m.changed = false
	return c.State.PutTaskValue(m.env.Partition, appliedKey, v)
}

func (m *Markers) Close() {}

func markerOf(rec *kafkaio.Record) ([]byte, bool) { return header(rec, shuffle.MarkerHeader) }

func header(rec *kafkaio.Record, key string) ([]byte, bool) {
	for _, h := range rec.Headers {
		if h.Key == key {
			return h.Value, true
		}
	}
	return nil, false
}

// LagBoard keeps, per internal partition, the slowest source partition it
// waits on, and reports the slowest of all as a gauge labelled with it.
type LagBoard struct {
	mu    sync.Mutex
	parts map[int32]slowest
	Gauge *prometheus.GaugeVec
	Now   func() time.Time
}

type slowest struct {
	src int32
	t   int64
}

func (l *LagBoard) report(env *Env, src int32, t int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.parts == nil {
		l.parts = map[int32]slowest{}
	}
	if ok {
		l.parts[env.Partition] = slowest{src, t}
	} else {
		delete(l.parts, env.Partition)
	}
	var worst slowest
	found := false
	for _, s := range l.parts {
		if !found || s.t < worst.t {
			worst, found = s, true
		}
	}
	l.Gauge.DeletePartialMatch(prometheus.Labels{"stream": env.Name})
	if found {
		l.Gauge.WithLabelValues(env.Name, strconv.Itoa(int(worst.src))).Set(float64(l.Now().UnixMilli()-worst.t) / 1000)
	}
}
