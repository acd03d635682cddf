package planner

import (
	"strings"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/shuffle"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/types"
)

// keyOutput decides how a stream's output records are keyed, and what a
// stream reading that output sees as its partition key and event time.
//
//   - message_key = 'col': every record is keyed by its row's value of
//     col, a TEXT column of the output (it stays in the JSON value too); a
//     NULL is an unkeyed record. Keyed records are placed with murmur2, so
//     col is the output's partition key.
//   - otherwise an aggregation keys each row by its group key: an upsert
//     stream's rows (GROUP BY keys, no window) and a windowed stream's
//     panes alike (dataflow.Sink; a keyless window's panes by their window
//     start). When the group key is one key the select list outputs
//     unchanged under its own name, that column is the output's partition
//     key, so a stream reading this one and grouping by it aggregates
//     locally (a windowed stream's only when created by a release that
//     keys panes: the server's keepLegacyPanes).
//   - otherwise records are unkeyed (spread round robin): no partition key.
//
// A stateless stream that outputs its input's watermark column unchanged
// passes the watermark (column and delay) on to its readers.
func keyOutput(def *catalog.Stream, p *Plan, o sql.Options) error {
	if mk, ok := o["message_key"]; ok {
		i := p.Output.Index(mk.Value)
		if i < 0 {
			return sql.Errorf(sql.CodeUndefinedColumn, "message_key %q is not a column of the output of stream %s", mk.Value, def.Name).
				WithPos(mk.Pos).WithHint("name a TEXT column of the select list: %s", outputNames(p.Output))
		}
		if t := p.Output[i].Type; t != types.Text {
			return sql.Errorf(sql.CodeDatatypeMismatch, "message_key %s is a %s column; it must be TEXT", p.Output[i].Name, t).
				WithPos(mk.Pos).WithHint("output the key as text, e.g. CAST(%s AS TEXT) AS %s_key, and set message_key = '%s_key'",
				p.Output[i].Name, p.Output[i].Name, p.Output[i].Name)
		}
		def.Options.MessageKey = p.Output[i].Name
		def.KeyColumn = p.Output[i].Name
	} else if p.Aggregate && len(p.Keys) == 1 {
		for i, e := range p.Project[:min(len(p.Project), len(p.Output))] {
			if c, ok := e.(*exec.ColRef); ok && c.Idx == 0 && strings.EqualFold(p.Output[i].Name, p.KeyNames[0]) {
				def.KeyColumn = p.Output[i].Name
				break
			}
		}
	}
	def.Windowed = p.Aggregate && p.Window != nil
	def.KeyedPanes = def.Windowed
	if p.Aggregate && p.Window == nil && len(p.Keys) > 0 {
		def.Upsert = true
		def.PrimaryKey = primaryKey(p)
	}
	if wm := p.Input.Watermark; wm != nil && !p.Aggregate {
		w := p.Input.Schema.Index(wm.Column)
		for i, e := range p.Project[:min(len(p.Project), len(p.Output))] {
			if c, ok := e.(*exec.ColRef); ok && c.Idx == w {
				def.Watermark = &catalog.Watermark{Column: p.Output[i].Name, DelayMs: wm.DelayMs}
				break
			}
		}
	}
	return nil
}

// primaryKey is the output column of each group key of an upsert stream,
// in GROUP BY order; nil when a key is not output unchanged.
func primaryKey(p *Plan) []string {
	pk := make([]string, len(p.Keys))
	for k := range p.Keys {
		for i, e := range p.Project[:min(len(p.Project), len(p.Output))] {
			if c, ok := e.(*exec.ColRef); ok && c.Idx == k {
				pk[k] = p.Output[i].Name
				break
			}
		}
		if pk[k] == "" {
			return nil
		}
	}
	return pk
}

func outputNames(s types.Schema) string {
	names := make([]string, len(s))
	for i, f := range s {
		names[i] = f.Name
	}
	return strings.Join(names, ", ")
}

// UserTopic checks a topic a user names (an option key of a source or
// stream; key "" when the topic comes from the relation's name): a
// malformed name is 22023, an internal one 42501.
func UserTopic(o sql.Options, key, topic string) error {
	pos := 0
	if key != "" {
		pos = o[key].Pos
	}
	if err := shuffle.ValidateTopicName(topic); err != nil {
		e := &sql.Error{Code: sql.CodeInvalidParameter, Message: err.Error(), Pos: pos, Err: err}
		if key == "" {
			return e.WithHint("set topic = '...' to a valid Kafka topic name")
		}
		return e
	}
	if shuffle.IsInternal(topic) {
		return sql.Errorf(sql.CodeInsufficientPriv, "topic %q is internal: topics starting with %q belong to TurbineSQL apps (catalog, repartition, combine, changelog and control topics)", topic, shuffle.InternalPrefix).
			WithPos(pos).WithHint("use a topic whose name does not start with %q", shuffle.InternalPrefix)
	}
	return nil
}

// TopicOptions checks each (option key, topic) pair; an empty topic (an
// unset optional one) is skipped. A topic that defaulted to the relation's
// name is reported against no option.
func TopicOptions(o sql.Options, pairs ...[2]string) error {
	for _, kv := range pairs {
		if kv[1] == "" {
			continue
		}
		key := kv[0]
		if _, set := o[key]; !set {
			key = ""
		}
		if err := UserTopic(o, key, kv[1]); err != nil {
			return err
		}
	}
	return nil
}
