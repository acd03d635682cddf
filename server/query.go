package server

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/pgwire"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/sql"
)

// decodeChunk is how many records a bounded read decodes per batch.
const decodeChunk = 4096

// query runs a bounded SELECT: the topic from its start to its end now.
func (s *Server) query(ctx context.Context, st *sql.Select, text string) (*pgwire.Result, error) {
	p, err := planner.BuildQuery(s.cat, st.Stmt, text)
	if err != nil {
		return nil, err
	}
	var ag *exec.Aggregator
	if p.Aggregate {
		if ag, err = dataflow.NewAggregator(p, 0, 0); err != nil {
			return nil, err
		}
	}
	dec := dataflow.NewDecoder(p.Input)
	policy := "fail"
	if p.Input.Source != nil {
		policy = p.Input.Source.OnError
	}
	var rows [][]any
	var chunk []*kafkaio.Record
	consume := func() error {
		if len(chunk) == 0 {
			return nil
		}
		values := make([][]byte, len(chunk))
		for i, r := range chunk {
			values[i] = r.Value
		}
		rec, decoded, derrs := dec.Decode(values)
		defer rec.Release()
		if len(derrs) > 0 && policy == "fail" {
			r := chunk[derrs[0].Index]
			code := "22P02" // invalid_text_representation
			var enc *exec.EncodingError
			if errors.As(derrs[0].Err, &enc) {
				code = enc.SQLState()
			}
			return sql.Errorf(code, "cannot decode record at %s/%d offset %d: %v", r.Topic, r.Partition, r.Offset, derrs[0].Err).
				WithHint("source %s has on_error = 'fail'; set 'skip' or 'dlq' to pass over such records", p.Input.Name)
		}
		b := exec.BatchOf(rec, p.Input.Schema)
		dataflow.FillKafkaTime(p.Input, b, chunk, decoded)
		if p.NeedsSeq {
			dataflow.AppendSeq(b, chunk, decoded)
		}
		chunk = chunk[:0]
		if ag != nil {
			_, err := ag.Consume(b, 0, false)
			return err
		}
		fb, err := exec.FilterBatch(b, p.Filter)
		if err != nil {
			return err
		}
		out, err := exec.Project(fb, p.Project)
		rows = append(rows, out...)
		return err
	}
	err = s.kafka.ReadAll(ctx, p.Input.Topic, func(r *kafkaio.Record) error {
		chunk = append(chunk, r)
		if len(chunk) >= decodeChunk {
			return consume()
		}
		return nil
	})
	if err == nil {
		err = consume()
	}
	if err != nil {
		return nil, err
	}
	if ag != nil {
		groups, err := ag.EmitAll()
		if err != nil {
			return nil, err
		}
		for _, b := range groups {
			if b, err = exec.FilterBatch(b, p.Having); err != nil {
				return nil, err
			}
			out, err := exec.Project(b, p.Project)
			if err != nil {
				return nil, err
			}
			rows = append(rows, out...)
		}
	}
	if p.Distinct {
		rows = distinctRows(rows)
	}
	if len(p.OrderBy) > 0 {
		sort.SliceStable(rows, func(i, j int) bool {
			for _, k := range p.OrderBy {
				c := compareValues(rows[i][k.Idx], rows[j][k.Idx])
				if c != 0 {
					return (c < 0) != k.Desc
				}
			}
			return false
		})
	}
	if p.Limit >= 0 && int64(len(rows)) > p.Limit {
		rows = rows[:p.Limit]
	}
	if p.Hidden > 0 {
		for i := range rows {
			rows[i] = rows[i][:len(p.Output)]
		}
	}
	cols := make([]pgwire.Column, len(p.Output))
	for i, f := range p.Output {
		cols[i] = pgwire.Column{Name: f.Name, OID: f.Type.OID()}
	}
	return &pgwire.Result{Columns: cols, Rows: rows, Tag: "SELECT " + strconv.Itoa(len(rows))}, nil
}

// compareValues orders result values; NULL sorts last ascending, as in
// PostgreSQL.
func compareValues(a, b any) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return 1
	case b == nil:
		return -1
	}
	switch x := a.(type) {
	case int64:
		switch y := b.(type) {
		case int64:
			return cmpOrdered(x, y)
		case float64:
			return cmpOrdered(float64(x), y)
		}
	case float64:
		switch y := b.(type) {
		case float64:
			return cmpOrdered(x, y)
		case int64:
			return cmpOrdered(x, float64(y))
		}
	case string:
		if y, ok := b.(string); ok {
			return strings.Compare(x, y)
		}
	case bool:
		if y, ok := b.(bool); ok {
			switch {
			case x == y:
				return 0
			case !x:
				return -1
			}
			return 1
		}
	case time.Time:
		if y, ok := b.(time.Time); ok {
			return x.Compare(y)
		}
	}
	return strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
}

func cmpOrdered[T int64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// flush waits until every running stream has processed everything written
// to its input before the call, closed the windows that input closes and
// committed. Streams feeding streams need rounds: it repeats until a round
// finds no input moved.
func (s *Server) flush(ctx context.Context) error { return s.flushStages(ctx) }

func sameEnds(a, b map[string]map[int32]int64) bool {
	if a == nil || len(a) != len(b) {
		return a != nil && len(a) == 0 && len(b) == 0
	}
	for t, pa := range a {
		pb, ok := b[t]
		if !ok || len(pa) != len(pb) {
			return false
		}
		for p, o := range pa {
			if pb[p] != o {
				return false
			}
		}
	}
	return true
}

// distinctRows keeps the first of each set of equal rows (NULLs equal, as
// SELECT DISTINCT treats them).
func distinctRows(rows [][]any) [][]any {
	seen := map[string]bool{}
	out := rows[:0]
	var key []byte
	for _, r := range rows {
		key = exec.AppendJSONArray(key[:0], r)
		if !seen[string(key)] {
			seen[string(key)] = true
			out = append(out, r)
		}
	}
	return out
}
