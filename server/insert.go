package server

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/pgwire"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/types"
)

// insert writes the statement's rows to the source's topic through a
// sourceWriter. Every row is checked before any is written: a refused
// statement writes nothing.
func (s *Server) insert(ctx context.Context, st *sql.Insert, text string) (*pgwire.Result, error) {
	colPos := make([]int, len(st.Columns))
	for i, c := range st.Columns {
		colPos[i] = sql.FindPos(text, c)
	}
	w, err := s.newSourceWriter(ctx, "INSERT", st.Table, sql.FindPos(text, st.Table), st.Columns, colPos)
	if err != nil {
		return nil, err
	}
	vals := make([]any, len(w.cols))
	for ri, row := range st.Rows {
		if len(row) != len(w.cols) {
			return nil, sql.Errorf(sql.CodeSyntax, "row %d has %d values for %d columns", ri+1, len(row), len(w.cols))
		}
		for j, e := range row {
			v, err := planner.Constant(e, w.columns[j].Type, text)
			if err != nil {
				return nil, err
			}
			vals[j] = v
		}
		if err := w.add(vals); err != nil {
			return nil, err.WithHint("row %d: %s", ri+1, err.HintMsg)
		}
	}
	n, err := w.write(ctx)
	if err != nil {
		return nil, err
	}
	return &pgwire.Result{Tag: "INSERT 0 " + strconv.Itoa(n)}, nil
}

// sourceWriter writes rows to a source's topic for INSERT and COPY ...
// FROM STDIN alike: one JSON record per row, keyed by the partition-key
// value as text and placed with murmur2 as Kafka's Java client would place
// it, so a stream reading the source finds each key on the partition its
// key group says. Rows are checked and encoded as they are added and
// written together by write: a statement refused at any row writes
// nothing.
type sourceWriter struct {
	kafka   recordProducer
	src     *catalog.Source
	cols    []int        // the schema index of each value a row gives, in order
	columns types.Schema // those columns
	parts   int          // the topic's partition count
	pk, evt int          // schema indexes of the partition key and the event time; -1: none
	now     time.Time
	recs    []*kafkaio.Record
}

// newSourceWriter resolves the target of verb (INSERT, COPY): table must
// be a source whose topic exists, columns (empty for all, in schema order)
// its columns; tablePos and colPos place errors in the statement.
func (s *Server) newSourceWriter(ctx context.Context, verb, table string, tablePos int, columns []string, colPos []int) (*sourceWriter, error) {
	rel, ok := s.cat.Relation(table)
	if !ok {
		return nil, sql.Errorf(sql.CodeUndefinedTable, "relation %q does not exist", table).WithPos(tablePos)
	}
	if rel.Kind != catalog.KindSource {
		return nil, sql.Errorf(sql.CodeWrongObjectType, "cannot %s into stream %q: streams are written by their query", verb, table).WithPos(tablePos)
	}
	src := rel.Source
	if err := userTopic(nil, "", src.Topic); err != nil {
		// Only a source restored from a catalog written before topics were
		// checked can get here.
		return nil, err
	}
	w := &sourceWriter{kafka: s.kafka, src: src, pk: -1, now: time.Now()}
	if len(columns) == 0 {
		for i := range src.Schema {
			w.cols = append(w.cols, i)
		}
	} else {
		for k, c := range columns {
			i := src.Schema.Index(c)
			if i < 0 {
				return nil, sql.Errorf(sql.CodeUndefinedColumn, "column %q of %s does not exist", c, src.Name).WithPos(colPos[k])
			}
			w.cols = append(w.cols, i)
		}
	}
	for _, i := range w.cols {
		w.columns = append(w.columns, src.Schema[i])
	}
	n, err := s.kafka.Partitions(ctx, src.Topic)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, sql.Errorf(sql.CodeUndefinedTable, "topic %q of source %s does not exist", src.Topic, src.Name)
	}
	w.parts = n
	if src.PartitionKey != "" {
		w.pk = src.Schema.Index(src.PartitionKey)
	}
	// The event-time column is NOT NULL here: a row without one has no
	// window, and every windowed stream of the source would refuse it
	// (on_error) after the statement said it was written.
	w.evt = src.NotNullTime()
	return w, nil
}

// add checks one row (a value per w.cols, nil for NULL; columns not given
// are NULL) and keeps its record for write. The only row it refuses is
// one without an event time; the caller says which row that was.
func (w *sourceWriter) add(given []any) *sql.Error {
	vals := make([]any, len(w.src.Schema))
	for j, v := range given {
		vals[w.cols[j]] = v
	}
	if w.evt >= 0 && vals[w.evt] == nil {
		name := w.src.Schema[w.evt].Name
		return sql.Errorf(sql.CodeNotNullViolation, "null value in column %q of relation %q violates not-null constraint", name, w.src.Name).
			WithHint("%s is the event-time column of source %s (its WATERMARK); give every row a time. Nothing of the statement was written", name, w.src.Name)
	}
	rec := &kafkaio.Record{Topic: w.src.Topic, Value: exec.AppendJSONRow(nil, w.src.Schema, vals), Timestamp: w.now}
	if w.pk >= 0 && vals[w.pk] != nil {
		// A non-nil dst: an empty text key is an empty key on the wire,
		// as the Java client sends it, not a null key.
		rec.Key = exec.AppendPartitionKey([]byte{}, vals[w.pk])
		rec.Partition = state.PartitionFor(rec.Key, w.parts)
	} else {
		// Kafka's clients spread unkeyed records; any partition is right.
		rec.Partition = int32((len(w.recs) + int(w.now.UnixNano()%int64(w.parts))) % w.parts)
	}
	w.recs = append(w.recs, rec)
	return nil
}

// recordProducer is what a sourceWriter needs of Kafka.
type recordProducer interface {
	ProduceSync(ctx context.Context, recs []*kafkaio.Record) error
}

// write produces every row added, and says how many.
func (w *sourceWriter) write(ctx context.Context) (int, error) {
	if len(w.recs) == 0 {
		return 0, nil
	}
	if err := w.kafka.ProduceSync(ctx, w.recs); err != nil {
		return 0, fmt.Errorf("write to %s: %w", w.src.Topic, err)
	}
	return len(w.recs), nil
}
