package server

import (
	"context"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/turbinesql/turbinesql/agg"
	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/types"
)

// statsRows bounds how many rows of a batch refresh a source's statistics:
// a sample, so keeping them costs little next to the batch itself.
const statsRows = 256

// sourceStats are the statistics the engine keeps per source: its rate in
// event time and a HyperLogLog of each column's cardinality. They are
// sampled from the topic when the source is declared (or the catalog is
// replayed) and refreshed by every stream and hop that reads it; DESCRIBE
// and EXPLAIN show them. Rows of a batch beyond statsRows are not counted
// in the cardinalities, which only need their order of magnitude.
type sourceStats struct {
	mu       sync.Mutex
	schema   types.Schema
	timeIdx  int
	hll      []agg.Func // one slot each; nil for a column of no supported type
	rows     int64      // rows seen (every row, not only the sampled ones)
	minT     int64
	maxT     int64
	hasTime  bool
	observed time.Time
}

func newSourceStats(src *catalog.Source) *sourceStats {
	st := &sourceStats{schema: src.Schema, timeIdx: -1, hll: make([]agg.Func, len(src.Schema))}
	if src.Watermark != nil {
		st.timeIdx = src.Schema.Index(src.Watermark.Column)
	}
	for i, f := range src.Schema {
		if fn, err := agg.New(agg.Spec{Name: "APPROX_COUNT_DISTINCT", ArgTypes: []types.Type{f.Type}}); err == nil {
			fn.Grow(1)
			st.hll[i] = fn
		}
	}
	return st
}

// observe folds a decoded batch in.
func (st *sourceStats) observe(b *exec.Batch) {
	if b.N == 0 {
		return
	}
	n := min(b.N, statsRows)
	slots := make([]uint32, n)
	st.mu.Lock()
	defer st.mu.Unlock()
	st.rows += int64(b.N)
	st.observed = time.Now()
	for i, fn := range st.hll {
		if fn == nil || i >= len(b.Cols) {
			continue
		}
		arr := headOf(b.Cols[i], n).ToArrow(memory.DefaultAllocator)
		fn.Update(slots, []arrow.Array{arr})
		arr.Release()
	}
	if st.timeIdx >= 0 {
		ts := b.Cols[st.timeIdx]
		for i := 0; i < b.N; i++ {
			if ts.IsNull(i) {
				continue
			}
			t := ts.I[i]
			if !st.hasTime || t < st.minT {
				st.minT = t
			}
			if !st.hasTime || t > st.maxT {
				st.maxT = t
			}
			st.hasTime = true
		}
	}
}

// headOf is the first n rows of v, sharing its memory.
func headOf(v *exec.Vec, n int) *exec.Vec {
	h := &exec.Vec{T: v.T, N: n}
	if v.I != nil {
		h.I = v.I[:n]
	}
	if v.F != nil {
		h.F = v.F[:n]
	}
	if v.S != nil {
		h.S = v.S[:n]
	}
	if v.B != nil {
		h.B = v.B[:n]
	}
	if v.Null != nil {
		h.Null = v.Null[:n]
	}
	return h
}

// empty reports whether nothing has been observed yet.
func (st *sourceStats) empty() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.rows == 0
}

// distinct is the estimated number of distinct values of column name (-1:
// unknown).
func (st *sourceStats) distinct(name string) int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	i := st.schema.Index(name)
	if i < 0 || st.hll[i] == nil || st.rows == 0 {
		return -1
	}
	v, _ := st.hll[i].Result(0).(int64)
	return v
}

// rate is rows per second of event time seen (0: unknown).
func (st *sourceStats) rate() float64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.hasTime || st.maxT <= st.minT {
		return 0
	}
	return float64(st.rows) / (float64(st.maxT-st.minT) / 1000)
}

// statsFor returns the statistics of a source, creating them empty.
func (s *Server) statsFor(src *catalog.Source) *sourceStats {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	st, ok := s.sourceStats[src.Name]
	if !ok {
		st = newSourceStats(src)
		s.sourceStats[src.Name] = st
	}
	return st
}

// sampleSource seeds a source's statistics from the last records of each
// of its partitions, if the topic has any.
func (s *Server) sampleSource(src *catalog.Source) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := s.statsFor(src)
	rel := &catalog.Relation{Name: src.Name, Topic: src.Topic, Schema: src.Schema, Source: src}
	dec := dataflow.NewDecoder(rel)
	var recs []*kafkaio.Record
	flushBatch := func() {
		if len(recs) == 0 {
			return
		}
		values := make([][]byte, len(recs))
		for i, r := range recs {
			values[i] = r.Value
		}
		rec, decoded, _ := dec.Decode(values)
		b := exec.BatchOf(rec, src.Schema)
		dataflow.FillKafkaTime(rel, b, recs, decoded)
		st.observe(b)
		rec.Release()
		recs = recs[:0]
	}
	err := s.kafka.ReadTail(ctx, src.Topic, nil, sampleRecords, func(r *kafkaio.Record) error {
		recs = append(recs, r)
		if len(recs) >= statsRows {
			flushBatch()
		}
		return nil
	})
	flushBatch()
	if err != nil {
		s.log.Warn("cannot sample source for its statistics", "source", src.Name, "err", err)
	}
}

// line describes a source's statistics for EXPLAIN.
func (st *sourceStats) line(column string) string {
	d := st.distinct(column)
	r := st.rate()
	if d < 0 && r == 0 {
		return "no statistics yet"
	}
	out := ""
	if r > 0 {
		out = strconv.FormatInt(int64(math.Round(r)), 10) + " rows/s in event time"
	}
	if d >= 0 {
		if out != "" {
			out += ", "
		}
		out += "≈" + strconv.FormatInt(d, 10) + " distinct " + column
	}
	return out
}
