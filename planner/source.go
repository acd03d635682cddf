package planner

import (
	"strings"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/streamplan"
	"github.com/turbinesql/turbinesql/types"
)

// SourceOptions are the WITH options CREATE SOURCE takes.
var SourceOptions = []string{"topic", "format", "partitions", "partition_key", "partition_hash", "on_error", "dlq_topic", "idle_timeout", "timestamp", "decimal_as_double"}

// isDecimal: a declared type of exact numerics (DECIMAL, NUMERIC, with or
// without precision).
func isDecimal(declared string) bool {
	name, _, _ := strings.Cut(strings.ToUpper(declared), "(")
	name = strings.TrimSpace(name)
	return name == "DECIMAL" || name == "NUMERIC"
}

// SourceFrom validates a CREATE SOURCE into a catalog entry; every option
// is checked here, once, with an error naming it.
func SourceFrom(st *sql.CreateSource, text string) (*catalog.Source, error) {
	o := st.Options
	if err := o.Check("source", SourceOptions...); err != nil {
		return nil, err
	}
	src := &catalog.Source{Name: st.Name, SQL: text, Topic: o.String("topic", st.Name)}
	decimalAsDouble := false
	switch v := strings.ToLower(o.String("decimal_as_double", "false")); v {
	case "true", "on":
		decimalAsDouble = true
	case "false", "off":
	default:
		return nil, sql.Errorf(sql.CodeInvalidParameter, "decimal_as_double must be true or false, not %q", v).WithPos(o["decimal_as_double"].Pos)
	}
	seen := map[string]bool{}
	for _, c := range st.Columns {
		if isDecimal(c.Declared) && !decimalAsDouble {
			// There is no exact decimal type yet: reading one as DOUBLE
			// would change sums and comparisons without saying so.
			return nil, sql.Errorf(sql.CodeNotSupported, "type %s of column %s is not supported: there is no exact DECIMAL type yet", c.Declared, c.Name).WithPos(c.Pos).
				WithHint("declare the column DOUBLE (or set decimal_as_double = true to read it as DOUBLE, inexactly), or carry it as BIGINT cents")
		}
		if seen[strings.ToLower(c.Name)] {
			return nil, sql.Errorf("42701", "column %q specified more than once", c.Name).WithPos(c.Pos)
		}
		seen[strings.ToLower(c.Name)] = true
		src.Schema = append(src.Schema, types.Field{Name: c.Name, Type: c.Type})
	}
	if len(src.Schema) == 0 {
		return nil, sql.Errorf(sql.CodeSyntax, "a source needs at least one column")
	}
	if src.Format = strings.ToLower(o.String("format", "json")); src.Format != "json" {
		return nil, sql.Errorf(sql.CodeInvalidParameter, "format %q is not supported", src.Format).WithPos(o["format"].Pos).WithHint("use format = 'json'")
	}
	n, err := o.Count("partitions")
	if err != nil {
		return nil, err
	}
	src.Partitions = n
	if src.IdleTimeoutMs, err = o.Millis("idle_timeout", catalog.DefaultIdleTimeoutMs); err != nil {
		return nil, err
	}
	if src.IdleTimeoutMs <= 0 {
		return nil, sql.Errorf(sql.CodeInvalidParameter, "idle_timeout must be positive").WithPos(o["idle_timeout"].Pos)
	}
	if pk, ok := o["partition_key"]; ok {
		i := src.Schema.Index(pk.Value)
		if i < 0 {
			return nil, sql.Errorf(sql.CodeUndefinedColumn, "partition_key %q is not a column of %s", pk.Value, st.Name).WithPos(pk.Pos)
		}
		src.PartitionKey = src.Schema[i].Name
	}
	if h, ok := o["partition_hash"]; ok {
		if !strings.EqualFold(h.Value, "murmur2") {
			return nil, sql.Errorf(sql.CodeInvalidParameter, "partition_hash %q is not supported", h.Value).WithPos(h.Pos).WithHint("the only declared hash is 'murmur2'")
		}
		src.PartitionHash = "murmur2"
	}
	if src.OnError, err = streamplan.ParseOnError(o.String("on_error", streamplan.OnErrorFail.String())); err != nil {
		return nil, OptionError(o, err)
	}
	src.DLQTopic = o.String("dlq_topic", streamplan.TopicName(streamplan.Topic{Kind: streamplan.TopicDLQ, Input: src.Topic}))
	dlq := ""
	if _, set := o["dlq_topic"]; set || src.OnError == streamplan.OnErrorDLQ {
		dlq = src.DLQTopic
	}
	if err := TopicOptions(o, [2]string{"topic", src.Topic}, [2]string{"dlq_topic", dlq}); err != nil {
		return nil, err
	}
	if st.Watermark != nil {
		i := src.Schema.Index(st.Watermark.Column)
		if i < 0 {
			return nil, sql.Errorf(sql.CodeUndefinedColumn, "WATERMARK FOR %q: no such column", st.Watermark.Column).WithPos(st.Watermark.Pos)
		}
		if src.Schema[i].Type != types.Timestamp {
			return nil, sql.Errorf(sql.CodeDatatypeMismatch, "WATERMARK FOR %s: column is %s, not TIMESTAMP", st.Watermark.Column, src.Schema[i].Type).WithPos(st.Watermark.Pos)
		}
		src.Watermark = &catalog.Watermark{Column: src.Schema[i].Name, DelayMs: st.Watermark.DelayMs}
	}
	if ts, ok := o["timestamp"]; ok {
		if !strings.EqualFold(ts.Value, "kafka") {
			return nil, sql.Errorf(sql.CodeInvalidParameter, "timestamp %q is not valid", ts.Value).WithPos(ts.Pos).
				WithHint("timestamp = 'kafka' takes event time from each record's Kafka timestamp; omit it to read the column from the JSON")
		}
		if src.Watermark == nil {
			return nil, sql.Errorf(sql.CodeInvalidParameter, "timestamp = 'kafka' needs a WATERMARK FOR <column> clause").WithPos(ts.Pos).
				WithHint("declare e.g. ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND: ts is then filled with each record's Kafka timestamp")
		}
		src.KafkaTimestamp = true
	}
	return src, nil
}
