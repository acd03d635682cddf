package optest

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/types"
)

// Format is how rows become the records of an input topic: a JSON object
// of the Schema's columns (the engine's own encoder, exec.AppendJSONRow),
// keyed by the text of column Key ("": unkeyed; a NULL key: no key).
type Format struct {
	Schema types.Schema
	Key    string
}

// ParseRow reads one row literal of schema: its values in column order,
// separated by commas, spaces around them trimmed. NULL is the null
// value; anything else is read as a cast from text reads it (exec.ParseText),
// except a TIMESTAMP, which may also be a whole number of seconds or a Go
// duration ("1500ms", "2m") since the epoch: "a,x,1,5" is ('a', 'x', 1,
// 1970-01-01 00:00:05) over (TEXT, TEXT, BIGINT, TIMESTAMP). A value
// holding a comma has no literal: build that row's record by hand.
func ParseRow(schema types.Schema, lit string) ([]any, error) {
	fields := strings.Split(lit, ",")
	if len(fields) != len(schema) {
		return nil, fmt.Errorf("row %q: %d values for %d columns (%s)", lit, len(fields), len(schema), schema)
	}
	row := make([]any, len(schema))
	for i, f := range fields {
		v, err := parseValue(strings.TrimSpace(f), schema[i].Type)
		if err != nil {
			return nil, fmt.Errorf("row %q, column %s: %w", lit, schema[i].Name, err)
		}
		row[i] = v
	}
	return row, nil
}

func parseValue(s string, t types.Type) (any, error) {
	if s == "NULL" {
		return nil, nil
	}
	if t == types.Timestamp {
		if sec, err := strconv.ParseInt(s, 10, 64); err == nil {
			return types.MillisTime(sec * 1000), nil
		}
		if d, err := time.ParseDuration(s); err == nil {
			return types.MillisTime(d.Milliseconds()), nil
		}
	}
	return exec.ParseText(s, t)
}

// Records encodes row literals (ParseRow) as records of partition p of
// topic, at offsets from off on.
func (f Format) Records(topic string, p int32, off int64, rows ...string) ([]*kafkaio.Record, error) {
	key := -1
	if f.Key != "" {
		if key = f.Schema.Index(f.Key); key < 0 {
			return nil, fmt.Errorf("key column %q is not in %s", f.Key, f.Schema)
		}
	}
	out := make([]*kafkaio.Record, 0, len(rows))
	for i, lit := range rows {
		row, err := f.ParseRow(lit)
		if err != nil {
			return nil, err
		}
		rec := &kafkaio.Record{Topic: topic, Partition: p, Offset: off + int64(i), Value: exec.AppendJSONRow(nil, f.Schema, row)}
		if key >= 0 {
			// The bytes the engine's own producers key a row by.
			rec.Key = exec.AppendPartitionKey(nil, row[key])
			if rec.Key == nil && row[key] != nil {
				rec.Key = []byte{} // '' is a key, NULL none
			}
		}
		out = append(out, rec)
	}
	return out, nil
}

// ParseRow is ParseRow over f's schema.
func (f Format) ParseRow(lit string) ([]any, error) { return ParseRow(f.Schema, lit) }
