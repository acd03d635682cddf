package server

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/turbinesql/turbinesql/bounded"
	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/pgcat"
	"github.com/turbinesql/turbinesql/pgwire"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/streamplan"
)

// decodeChunk is how many records a bounded read decodes per batch.
const decodeChunk = 4096

// queryEnv is one bounded query of a session: what the planner resolves
// names against (sources, streams, the system catalog) and what the
// bounded executor reads.
type queryEnv struct {
	s   *session
	ctx context.Context
	now time.Time // the statement's now(), read once
	// streams are the streams the query reads, by name: it warns of
	// those whose results are known wrong (degraded).
	streams map[string]bool
}

// Now is the statement's start time: now() is the same value throughout
// one statement, as in PostgreSQL.
func (q *queryEnv) Now() time.Time {
	if q.now.IsZero() {
		q.now = q.s.srv.clock()
	}
	return q.now
}

var (
	_ planner.Env    = (*queryEnv)(nil)
	_ bounded.Source = (*queryEnv)(nil)
)

func (q *queryEnv) Relation(name string) (*catalog.Relation, bool) {
	rel, ok := q.s.srv.cat.Relation(name)
	if ok && rel.Stream != nil {
		if q.streams == nil {
			q.streams = map[string]bool{}
		}
		q.streams[rel.Name] = true
	}
	return rel, ok
}
func (q *queryEnv) Catalog() pgcat.Env                   { return q.s }
func (q *queryEnv) Run(p *planner.Plan) ([][]any, error) { return bounded.Run(q.ctx, p, q) }

// Topic reads a relation's whole topic as one batch (a relation joined to
// others, or read in a subquery).
func (q *queryEnv) Topic(ctx context.Context, rel *catalog.Relation) (*exec.Batch, error) {
	recs, err := q.s.srv.readRelation(ctx, rel)
	if err != nil {
		return nil, err
	}
	return q.s.srv.decodeAll(rel, recs, false)
}

// decodeAll decodes records of rel into one batch, an upsert stream's
// compacted by primary key where its records are keyed otherwise.
func (s *Server) decodeAll(rel *catalog.Relation, recs []*kafkaio.Record, needsSeq bool) (*exec.Batch, error) {
	var out *exec.Batch
	err := s.decodeRecords(rel, recs, needsSeq, func(b *exec.Batch) error {
		out = appendBatch(out, b)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = &exec.Batch{Cols: make([]*exec.Vec, len(rel.Schema))}
		for i, f := range rel.Schema {
			out.Cols[i], _ = exec.VecOf(f.Type, nil)
		}
	}
	if cols := compactColumns(rel); cols != nil {
		out = lastPerKey(out, cols)
	}
	return out, nil
}

// compactColumns are the primary-key columns an upsert stream's rows are
// compacted by after decoding: with message_key its records are keyed by
// that column, not by the group key, so several groups share a record key
// (and a group's tombstone cannot be told apart). nil: no such compaction.
func compactColumns(rel *catalog.Relation) []int {
	st := rel.Stream
	if st == nil || !st.Upsert || st.Options.MessageKey == "" || len(st.PrimaryKey) == 0 {
		return nil
	}
	cols := make([]int, len(st.PrimaryKey))
	for i, k := range st.PrimaryKey {
		if cols[i] = rel.Schema.Index(k); cols[i] < 0 {
			return nil
		}
	}
	return cols
}

// lastPerKey keeps the last row of each value of cols, in input order.
func lastPerKey(b *exec.Batch, cols []int) *exec.Batch {
	keyCols := make([]*exec.Vec, len(cols))
	for i, c := range cols {
		keyCols[i] = b.Cols[c]
	}
	last := map[string]int{}
	var key []byte
	for i := 0; i < b.N; i++ {
		key = exec.AppendKey(key[:0], keyCols, i)
		last[string(key)] = i
	}
	var idx []int
	for i := 0; i < b.N; i++ {
		key = exec.AppendKey(key[:0], keyCols, i)
		if last[string(key)] == i {
			idx = append(idx, i)
		}
	}
	out := &exec.Batch{N: len(idx)}
	for _, c := range b.Cols {
		out.Cols = append(out.Cols, exec.Take(c, idx))
	}
	return out
}

func appendBatch(a, b *exec.Batch) *exec.Batch {
	if a == nil {
		return b
	}
	return exec.Concat(a, b)
}

// query runs a bounded SELECT: the plan of the planner, over topics read
// from their start to their end now and the system catalog.
func (s *session) query(ctx context.Context, st *sql.Select, text string) (*pgwire.Result, error) {
	// The system catalog is answered while Kafka is out of reach once the
	// catalog has been read from it; reading a topic needs Kafka (readRelation).
	if !s.srv.replayed.Load() {
		if err := s.srv.needKafka(); err != nil {
			return nil, err
		}
	}
	env := &queryEnv{s: s, ctx: ctx}
	p, err := planSelect(env, st, text)
	if err != nil {
		return nil, err
	}
	var rows [][]any
	if p.From != nil || len(p.Union) > 0 {
		rows, err = bounded.Run(ctx, p, env)
	} else {
		rows, err = s.srv.scanQuery(ctx, p)
	}
	if err != nil {
		return nil, err
	}
	res := &pgwire.Result{Columns: resultColumns(p), Rows: rows, Tag: "SELECT " + strconv.Itoa(len(rows))}
	if len(env.streams) > 0 {
		res.Notices = s.srv.degradedNotices(env.streams)
	}
	return res, nil
}

func planSelect(env planner.Resolver, st *sql.Select, text string) (*planner.Plan, error) {
	if st.SetOpr != nil {
		return planner.BuildNode(env, st.SetOpr, text)
	}
	return planner.BuildNode(env, st.Stmt, text)
}

func resultColumns(p *planner.Plan) []pgwire.Column {
	cols := make([]pgwire.Column, len(p.Output))
	for i, f := range p.Output {
		cols[i] = pgwire.Column{Name: f.Name, OID: f.PGOID()}
	}
	return cols
}

// readRelation reads a relation's topic to its end now. An upsert stream's
// topic is a changelog: only the latest record of each key counts, and a
// key whose latest record is a tombstone (no value) is absent, so a read
// shows the current table; a WHERE on the key then filters that table.
func (s *Server) readRelation(ctx context.Context, rel *catalog.Relation) ([]*kafkaio.Record, error) {
	if err := s.needKafka(); err != nil {
		return nil, err
	}
	var recs []*kafkaio.Record
	err := s.kafka.ReadFrom(ctx, rel.Topic, rel.From, func(r *kafkaio.Record) error {
		recs = append(recs, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	// With message_key the record key is that column, not the group key,
	// so records of different groups share keys: no compaction by key.
	if rel.Stream != nil && rel.Stream.Upsert && rel.Stream.Options.MessageKey == "" {
		recs = latestPerKey(recs)
	}
	return recs, nil
}

// latestPerKey compacts a changelog as Kafka's log compaction would: the
// last record of each key, in the order those records were written to
// their partitions; tombstones are dropped. Unkeyed records all stay.
func latestPerKey(recs []*kafkaio.Record) []*kafkaio.Record {
	last := map[string]int{}
	for i, r := range recs {
		if r.Key != nil {
			last[strconv.Itoa(int(r.Partition))+"/"+string(r.Key)] = i
		}
	}
	out := recs[:0:0]
	for i, r := range recs {
		if r.Key != nil && last[strconv.Itoa(int(r.Partition))+"/"+string(r.Key)] != i {
			continue
		}
		if r.Value == nil {
			continue
		}
		out = append(out, r)
	}
	return out
}

// decodeRecords decodes records of rel a chunk at a time.
func (s *Server) decodeRecords(rel *catalog.Relation, recs []*kafkaio.Record, needsSeq bool, fn func(*exec.Batch) error) error {
	dec := dataflow.NewDecoder(rel)
	policy := streamplan.OnErrorFail
	if rel.Source != nil {
		policy = rel.Source.OnError
	}
	for len(recs) > 0 {
		chunk := recs[:min(len(recs), decodeChunk)]
		recs = recs[len(chunk):]
		values := make([][]byte, len(chunk))
		for i, r := range chunk {
			values[i] = r.Value
		}
		rec, decoded, derrs := dec.Decode(values)
		if len(derrs) > 0 && policy == streamplan.OnErrorFail {
			rec.Release()
			r := chunk[derrs[0].Index]
			code := "22P02" // invalid_text_representation
			var enc *exec.EncodingError
			if errors.As(derrs[0].Err, &enc) {
				code = enc.SQLState()
			}
			e := sql.Errorf(code, "cannot decode record at %s/%d offset %d: %v", r.Topic, r.Partition, r.Offset, derrs[0].Err)
			if rel.Stream != nil {
				// A stream's output has no on_error: the record is not one
				// it wrote with its columns (its own start up to the end).
				return e.WithHint("the record is in the output topic of stream %q but does not have its columns: something other than the stream wrote it there", rel.Name)
			}
			return e.WithHint("source %s has on_error = 'fail'; set 'skip' or 'dlq' to pass over such records", rel.Name)
		}
		b := exec.BatchOf(rec, rel.Schema)
		dataflow.FillKafkaTime(rel, b, chunk, decoded)
		if needsSeq {
			dataflow.AppendSeq(b, chunk, decoded)
		}
		err := fn(b)
		rec.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// scanQuery runs a query over one source or stream, decoding its topic a
// chunk at a time into the filter and projection, or the aggregation.
func (s *Server) scanQuery(ctx context.Context, p *planner.Plan) ([][]any, error) {
	var ag *exec.Aggregator
	var err error
	if p.Aggregate {
		if ag, err = bounded.Aggregator(p, 0); err != nil {
			return nil, err
		}
	}
	recs, fromState, err := s.lookupFromState(p)
	if err != nil {
		return nil, err
	}
	if !fromState {
		if recs, err = s.readRelation(ctx, p.Input); err != nil {
			return nil, err
		}
	}
	var rows [][]any
	decode := func(fn func(*exec.Batch) error) error { return s.decodeRecords(p.Input, recs, p.NeedsSeq, fn) }
	if compactColumns(p.Input) != nil {
		// Compacted by primary key: the whole topic is one batch.
		decode = func(fn func(*exec.Batch) error) error {
			b, err := s.decodeAll(p.Input, recs, p.NeedsSeq)
			if err != nil {
				return err
			}
			return fn(b)
		}
	}
	err = decode(func(b *exec.Batch) error {
		// Once per batch: a cancelled statement (statement_timeout, a
		// cancel request, the client leaving) stops here.
		if err := ctx.Err(); err != nil {
			return err
		}
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
	})
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if ag != nil {
		if rows, err = bounded.Aggregated(p, ag); err != nil {
			return nil, err
		}
	}
	if p.Distinct {
		rows = bounded.Distinct(rows)
	}
	return bounded.Finish(p, rows), nil
}

// explainQuery prints the plan of a bounded query (EXPLAIN SELECT ...).
func (s *session) explainQuery(ctx context.Context, st *sql.Select, text string) (*pgwire.Result, error) {
	p, err := planSelect(&queryEnv{s: s, ctx: ctx}, st, text)
	if err != nil {
		return nil, err
	}
	res := &pgwire.Result{Columns: textColumns("QUERY PLAN"), Tag: "EXPLAIN"}
	for _, l := range planner.ExplainQuery(p) {
		res.Rows = append(res.Rows, []any{l})
	}
	return res, nil
}
