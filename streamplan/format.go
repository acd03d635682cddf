package streamplan

import (
	"fmt"
	"strings"

	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/types"
)

// Describe is the aggregation as EXPLAIN prints it after the operator's
// name: keys=[...] window=... aggs=[...] (keys and window when it has them).
func (a *Aggregation) Describe() string {
	var parts []string
	if len(a.KeyNames) > 0 {
		parts = append(parts, "keys=["+strings.Join(a.KeyNames, ", ")+"]")
	}
	if w := a.Window; w != nil {
		switch w.Kind() {
		case Hop:
			parts = append(parts, fmt.Sprintf("window=HOP(%s, slide %d ms, size %d ms) slices=%d ms", w.TimeCol, w.Spec.Slide, w.Spec.Size, w.Spec.SliceSize()))
		case Session:
			parts = append(parts, fmt.Sprintf("window=SESSION(%s, gap %d ms)", w.TimeCol, w.SizeMs))
		default:
			parts = append(parts, fmt.Sprintf("window=%s(%s, %d ms)", w.Kind(), w.TimeCol, w.SizeMs))
		}
	}
	aggs := make([]string, len(a.Aggs))
	for i, c := range a.Aggs {
		aggs[i] = c.Text
	}
	return strings.Join(append(parts, "aggs=["+strings.Join(aggs, ", ")+"]"), " ")
}

// String prints the graph, a line per stage, input, operator and
// exchange: what the planner's golden files show.
func (g *Graph) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "graph %s: strategy %s (rule %s), guarantee %s", g.Stream, g.Strategy, g.Rule, g.Guarantee)
	if g.Keyless {
		b.WriteString(", keyless")
	}
	b.WriteString("\n")
	for _, s := range g.Stages {
		fmt.Fprintf(&b, "stage %d %s: group %s", s.ID, s.Role, s.Group)
		if s.Shared {
			b.WriteString(" (shared)")
		}
		b.WriteString("\n")
		for _, in := range s.Inputs {
			switch in.Kind {
			case FromRelation:
				fmt.Fprintf(&b, "  input: relation %s (topic %s)\n", in.Relation, in.Topic)
			case FromExchange:
				fmt.Fprintf(&b, "  input: exchange %d (topic %s)\n", in.Exchange, in.Topic)
			}
		}
		for _, op := range s.Ops {
			fmt.Fprintf(&b, "  %s: %s\n", op.Kind(), describeOp(op))
		}
	}
	for i, x := range g.Exchanges {
		parts := "as many as the input"
		if x.Partitions > 0 {
			parts = fmt.Sprint(x.Partitions)
		}
		fmt.Fprintf(&b, "exchange %d %s: stage %d → stage %d, topic %s, key [%s], partitions %s (%s), progress %s from every partition of %s\n",
			i, x.Kind, x.From, x.To, x.Topic, strings.Join(x.Key, ", "), parts, x.PartitionsOption, x.Progress, x.Source)
	}
	return b.String()
}

func describeOp(op Op) string {
	switch o := op.(type) {
	case *DecodeSpec:
		var w []string
		kind := "stream"
		if o.Source {
			kind = "source"
		}
		w = append(w, fmt.Sprintf("%s %s (topic %s, %s)", kind, o.Relation, o.Topic, o.Format))
		w = append(w, "columns ("+schemaList(o.Columns)+")")
		if o.PartitionKey != "" {
			w = append(w, "partition key "+o.PartitionKey)
		}
		if o.EventTime >= 0 {
			w = append(w, fmt.Sprintf("event time %s (#%d)", o.EventTimeColumn, o.EventTime))
		}
		if o.WatermarkColumn != "" {
			w = append(w, fmt.Sprintf("watermark %s - %d ms", o.WatermarkColumn, o.WatermarkDelayMs))
		}
		if o.KafkaTimestamp {
			w = append(w, "Kafka timestamp")
		}
		w = append(w, fmt.Sprintf("idle %d ms", o.IdleTimeoutMs))
		if o.TimeRequired {
			w = append(w, "time required")
		}
		w = append(w, "on_error "+o.OnError.String())
		if o.OnError == OnErrorDLQ {
			w = append(w, "dlq "+o.DLQTopic)
		}
		if o.FromExchange {
			w = append(w, "from the exchange")
		}
		if o.NeedsSeq {
			w = append(w, "with input positions")
		}
		if o.Misplaced != "" {
			w = append(w, "misplaced ("+o.Misplaced+")")
		}
		return strings.Join(w, ", ")
	case *PlacementCheckSpec:
		s := fmt.Sprintf("key %s (#%d)", o.Key, o.KeyIdx)
		if o.Declared {
			s += ", murmur2 declared"
		}
		return s
	case *FilterSpec:
		role := "where"
		if o.Role == FilterHaving {
			role = "having"
		}
		return role + " " + o.Predicate.String()
	case *ProjectSpec:
		s := ExprList(o.Exprs, o.Output)
		if o.AddFinal {
			s += ", is_final"
		}
		if o.Tombstones {
			s += " (tombstones)"
		}
		return s
	case *HashAggSpec:
		s := o.Describe()
		if o.AllowedLatenessMs > 0 {
			s += fmt.Sprintf(" lateness=%d ms", o.AllowedLatenessMs)
		}
		if o.LateDataTopic != "" {
			s += " late_data_topic=" + o.LateDataTopic
		}
		if o.EmitEveryMs > 0 {
			s += fmt.Sprintf(" emit every %d ms", o.EmitEveryMs)
		}
		if o.StateTTLMs > 0 {
			s += fmt.Sprintf(" state_ttl=%d ms", o.StateTTLMs)
		}
		return s
	case *PartialAggSpec:
		s := o.Describe() + fmt.Sprintf(" → exchange %d", o.Exchange)
		if o.EmitEveryMs > 0 {
			s += fmt.Sprintf(" emit every %d ms", o.EmitEveryMs)
		}
		return s
	case *MergeSpec:
		s := o.Describe()
		if o.EmitEveryMs > 0 {
			s += fmt.Sprintf(" emit every %d ms", o.EmitEveryMs)
		}
		return s
	case *ExchangeSpec:
		return fmt.Sprintf("exchange %d by %s", o.Exchange, o.By)
	case *SinkSpec:
		s := fmt.Sprintf("stream %s to topic %s (%s), columns (%s)", o.Stream, o.Topic, o.Format, schemaList(o.Output))
		if o.MessageKey != "" {
			s += ", message_key " + o.MessageKey
		}
		if o.KeyColumn != "" {
			s += ", keyed by " + o.KeyColumn
		}
		if o.Partitions > 0 {
			s += fmt.Sprintf(", %d partitions", o.Partitions)
		}
		s += ", " + o.Guarantee.String() + ", on_error " + o.OnError.String()
		return s
	}
	return fmt.Sprintf("%T", op)
}

func schemaList(s types.Schema) string {
	parts := make([]string, len(s))
	for i, f := range s {
		parts[i] = f.Name + " " + f.Type.String()
	}
	return strings.Join(parts, ", ")
}

// ExprList prints expressions with the output names they take (a AS b
// when they differ), as EXPLAIN's Project line does.
func ExprList(es []exec.Expr, out types.Schema) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.String()
		if out[i].Name != e.String() {
			parts[i] += " AS " + out[i].Name
		}
	}
	return strings.Join(parts, ", ")
}
