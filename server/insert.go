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
)

// insert writes one JSON record per row to the source's topic, keyed by the
// partition-key value as text and placed with murmur2 as Kafka's Java
// client would place it. Every row is checked before any is written: a
// refused statement writes nothing.
func (s *Server) insert(ctx context.Context, st *sql.Insert, text string) (*pgwire.Result, error) {
	rel, ok := s.cat.Relation(st.Table)
	if !ok {
		return nil, sql.Errorf(sql.CodeUndefinedTable, "relation %q does not exist", st.Table).WithPos(sql.FindPos(text, st.Table))
	}
	if rel.Kind != catalog.KindSource {
		return nil, sql.Errorf("42809", "cannot INSERT into stream %q: streams are written by their query", st.Table)
	}
	src := rel.Source
	if err := userTopic(nil, "", src.Topic); err != nil {
		// Only a source restored from a catalog written before topics were
		// checked can get here.
		return nil, err
	}
	cols := make([]int, 0, len(src.Schema))
	if len(st.Columns) == 0 {
		for i := range src.Schema {
			cols = append(cols, i)
		}
	} else {
		for _, c := range st.Columns {
			i := src.Schema.Index(c)
			if i < 0 {
				return nil, sql.Errorf(sql.CodeUndefinedColumn, "column %q of %s does not exist", c, src.Name).WithPos(sql.FindPos(text, c))
			}
			cols = append(cols, i)
		}
	}
	n, err := s.kafka.Partitions(ctx, src.Topic)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, sql.Errorf(sql.CodeUndefinedTable, "topic %q of source %s does not exist", src.Topic, src.Name)
	}
	pk := -1
	if src.PartitionKey != "" {
		pk = src.Schema.Index(src.PartitionKey)
	}
	// The event-time column is NOT NULL for INSERT: a row without one has
	// no window, and every windowed stream of the source would refuse it
	// (on_error) after the statement said it was written.
	evt := src.NotNullTime()
	recs := make([]*kafkaio.Record, 0, len(st.Rows))
	now := time.Now()
	for ri, row := range st.Rows {
		if len(row) != len(cols) {
			return nil, sql.Errorf(sql.CodeSyntax, "row %d has %d values for %d columns", ri+1, len(row), len(cols))
		}
		vals := make([]any, len(src.Schema))
		for j, e := range row {
			v, err := planner.Constant(e, src.Schema[cols[j]].Type, text)
			if err != nil {
				return nil, err
			}
			vals[cols[j]] = v
		}
		if evt >= 0 && vals[evt] == nil {
			// Refused before anything is written: a multi-row statement
			// writes all its rows or none.
			return nil, sql.Errorf(sql.CodeNotNullViolation, "null value in column %q of relation %q violates not-null constraint", src.Schema[evt].Name, src.Name).
				WithHint("row %d: %s is the event-time column of source %s (its WATERMARK); give every row a time. Nothing of the statement was written", ri+1, src.Schema[evt].Name, src.Name)
		}
		rec := &kafkaio.Record{Topic: src.Topic, Value: exec.AppendJSONRow(nil, src.Schema, vals), Timestamp: now}
		if pk >= 0 && vals[pk] != nil {
			// A non-nil dst: an empty text key is an empty key on the
			// wire, as the Java client sends it, not a null key.
			rec.Key = exec.AppendPartitionKey([]byte{}, vals[pk])
			rec.Partition = state.PartitionFor(rec.Key, n)
		} else {
			// Kafka's clients spread unkeyed records; any partition is right.
			rec.Partition = int32((ri + int(now.UnixNano()%int64(n))) % n)
		}
		recs = append(recs, rec)
	}
	if err := s.kafka.ProduceSync(ctx, recs); err != nil {
		return nil, fmt.Errorf("write to %s: %w", src.Topic, err)
	}
	return &pgwire.Result{Tag: "INSERT 0 " + strconv.Itoa(len(recs))}, nil
}
