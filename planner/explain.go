package planner

import (
	"fmt"
	"strings"

	"github.com/turbinesql/turbinesql/agg"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/streamplan"
	"github.com/turbinesql/turbinesql/types"
)

// ExplainStream is EXPLAIN CREATE STREAM's text of a stream graph: the
// rule that chose the strategy, what the cost rule measured, the
// operators as a tree (sink first, each indented under the one it
// feeds), the delivery guarantee with each aggregate's sensitivity to
// duplicates, and what the plan relies on of its input's placement.
func ExplainStream(g *streamplan.Graph) []string {
	final := g.Final()
	var decode *streamplan.DecodeSpec
	var where *streamplan.FilterSpec
	for _, st := range g.Stages {
		for _, op := range st.Ops {
			switch o := op.(type) {
			case *streamplan.DecodeSpec:
				if decode == nil && !o.FromExchange {
					decode = o
				}
			case *streamplan.FilterSpec:
				if o.Role == streamplan.FilterWhere {
					where = o
				}
			}
		}
	}
	sink := g.Sink()
	nodes := []string{fmt.Sprintf("Sink: topic %s (%s, stream %s)", sink.Topic, sink.Format, sink.Stream)}
	project := streamplan.Find[*streamplan.ProjectSpec](final.Ops)
	line := "Project: " + exprList(project.Exprs, project.Output)
	if project.AddFinal {
		line += ", " + IsFinalColumn
	}
	nodes = append(nodes, line)
	for _, op := range final.Ops {
		if f, ok := op.(*streamplan.FilterSpec); ok && f.Role == streamplan.FilterHaving {
			nodes = append(nodes, "Filter (HAVING): "+f.Predicate.String())
		}
	}
	a := aggregationOf(final)
	if a != nil {
		nodes = append(nodes, aggregateLine(a))
	}
	if where != nil {
		nodes = append(nodes, "Filter: "+where.Predicate.String())
	}
	for _, x := range g.Exchanges {
		nodes = append(nodes, exchangeLine(x, a))
	}
	nodes = append(nodes, sourceLine(decode.Relation, decode.Topic, decode.PartitionKey, decode.WatermarkColumn, decode.WatermarkDelayMs, decode.KafkaTimestamp))
	out := strategyLines(g.Strategy, g.Rule, g.Reason, g.Estimate, decode.Relation)
	for i, n := range nodes {
		out = append(out, treePrefix(i)+n)
	}
	out = append(out, deliveryLines(a, g.Guarantee)...)
	return append(out, placementLines(g, decode)...)
}

// aggregationOf is what the stage aggregates (nil: it does not).
func aggregationOf(st *streamplan.Stage) *streamplan.Aggregation {
	for _, op := range st.Ops {
		switch o := op.(type) {
		case *streamplan.HashAggSpec:
			return &o.Aggregation
		case *streamplan.MergeSpec:
			return &o.Aggregation
		}
	}
	return nil
}

func strategyLines(s streamplan.Strategy, rule, reason string, e *streamplan.Estimate, input string) []string {
	out := []string{fmt.Sprintf("Strategy: %s (rule %s: %s)", s, rule, reason)}
	if e != nil {
		out = append(out, fmt.Sprintf("Estimate: %d rows sampled from %d partitions; %.1f rows per window, %.1f keys per window per partition; repartition %d records (%d bytes), combine %d partials (%d bytes)",
			e.SampleRows, e.Partitions, e.RowsPerWindow, e.KeysPerWindowPartition, e.RepartitionRecords, e.RepartitionBytes, e.CombineRecords, e.CombineBytes))
		if e.SourceStats != "" {
			out = append(out, fmt.Sprintf("Statistics of %s: %s", input, e.SourceStats))
		}
	}
	return out
}

func aggregateLine(a *streamplan.Aggregation) string { return "HashAggregate " + a.Describe() }

// exchangeLine describes an exchange; a is the aggregation it feeds.
func exchangeLine(x *streamplan.Exchange, a *streamplan.Aggregation) string {
	switch x.Kind {
	case streamplan.ExchangeCombine:
		unit := "window"
		if a != nil && a.Window != nil && a.Window.Kind() == streamplan.Hop {
			unit = "slice" // HOP ships slices; the merge side builds windows from them
		}
		if len(x.Key) == 0 {
			return fmt.Sprintf("Combine: each partition of %s pre-aggregates per %s and ships one partial per %s to internal topic %s (one partition; a window closes once every source partition has confirmed it)",
				x.Source, unit, unit, x.Topic)
		}
		return fmt.Sprintf("Combine: each partition of %s pre-aggregates per (%s, key) and ships partials to internal topic %s (murmur2 on the group key; a window closes once every source partition has confirmed it)",
			x.Source, unit, x.Topic)
	case streamplan.ExchangeRepartition:
		by := strings.Join(x.Key, ", ")
		return fmt.Sprintf("Repartition by %s: internal topic %s (murmur2 on %s; watermark markers from every source partition)", by, x.Topic, by)
	}
	return "Exchange: " + x.Topic
}

func sourceLine(name, topic, partitionKey, wmCol string, wmDelay int64, kafkaTime bool) string {
	src := fmt.Sprintf("Source: %s (topic %s", name, topic)
	if partitionKey != "" {
		src += ", partition key " + partitionKey
	}
	if wmCol != "" {
		src += fmt.Sprintf(", watermark %s - %d ms", wmCol, wmDelay)
		if kafkaTime {
			src += fmt.Sprintf(", %s = Kafka timestamp", wmCol)
		}
	}
	return src + ")"
}

// deliveryLines tell which processing guarantee a stream needs (the
// seed's aggregate sensitivity): per aggregate, how a duplicated input
// row (what an at-least-once replay after a crash can feed) moves it, and
// a recommendation. a is the stream's aggregation (nil: none).
func deliveryLines(a *streamplan.Aggregation, guarantee streamplan.Guarantee) []string {
	out := []string{"Guarantee: " + guarantee.String()}
	worst, worstText := agg.Unaffected, ""
	if a != nil && len(a.Aggs) > 0 {
		out = append(out, "Duplicate sensitivity:")
		for _, c := range a.Aggs {
			sv := agg.SensitivityOf(c.Spec)
			out = append(out, fmt.Sprintf("   %s: %s (%s)", c.Text, sv, sv.Why()))
			if sv > worst || worstText == "" {
				worst, worstText = max(worst, sv), c.Text
			}
		}
	}
	var rec string
	switch {
	case a == nil:
		rec = "at_least_once if the readers of the output dedupe (a replay after a crash repeats rows), else exactly_once"
	case worst == agg.Biased:
		rec = fmt.Sprintf("exactly_once: %s is directly biased, so every row replayed after a crash goes into the answer", worstText)
	case worst == agg.Attenuated:
		rec = fmt.Sprintf("at_least_once when windows hold many rows (%s moves by duplicates over rows); exactly_once for small windows", worstText)
	case a.Window != nil:
		rec = "at_least_once: no aggregate moves on a duplicated row (a pane written twice after a crash carries the same value and identity; dedupe on its turbine.key and turbine.window.start headers)"
	default:
		rec = "at_least_once: no aggregate moves on a duplicated row (a pane written twice after a crash carries the same value; dedupe on (window, key))"
	}
	return append(out, "Recommendation: "+rec)
}

// placementLines are what EXPLAIN says of the placement check and the
// declaration, and of an input known misplaced (DecodeSpec.Misplaced):
// whether this plan relies on its placement.
func placementLines(g *streamplan.Graph, d *streamplan.DecodeSpec) []string {
	var out []string
	check := streamplan.Find[*streamplan.PlacementCheckSpec](g.Final().Ops)
	if why := d.Misplaced; why != "" {
		what := fmt.Sprintf("Placement: the records of %s are not placed by murmur2 on %s (%s)", d.Relation, d.PartitionKey, why)
		switch x := g.Exchange(streamplan.ExchangeRepartition); {
		case check != nil:
			out = append(out, "WARNING: "+what+": this local plan would keep one key on several partitions and emit each of its groups in pieces, with partial totals; use strategy = 'repartition' (or 'auto')")
		case g.Rule == RuleMisplacedInput && x != nil:
			out = append(out, what+": a local plan would emit each key's groups in pieces, so the planner re-keys the records by "+strings.Join(x.Key, ", ")+" (rule "+RuleMisplacedInput+")")
		default:
			out = append(out, what+": this plan does not rely on their placement")
		}
	}
	if check == nil {
		return out
	}
	line := "Placement: checked on partition key " + check.Key + " (SHOW PARTITIONS); "
	if check.Declared {
		return append(out, line+"partition_hash murmur2 declared: after a partition-count change, the start-up cleanup drops the state of keys that moved")
	}
	return append(out, line+"partition_hash undeclared: after a partition-count change, the state of keys that moved is kept")
}

// ExplainQuery is EXPLAIN SELECT's text of a bounded query.
func ExplainQuery(p *Plan) []string {
	if len(p.Union) == 0 {
		return explainBounded(p)
	}
	u := "Union"
	if p.UnionAll {
		u += " all"
	}
	lines := []string{u}
	for _, b := range p.Union {
		for _, l := range explainBounded(b) {
			lines = append(lines, "   "+l)
		}
	}
	return lines
}

// explainBounded prints a bounded plan as a tree, the result first.
func explainBounded(p *Plan) []string {
	n := "Result"
	if len(p.OrderBy) > 0 {
		n += " (sorted)"
	}
	if p.Limit >= 0 {
		n += fmt.Sprintf(" limit %d", p.Limit)
	}
	nodes := []string{n, "Project: " + exprList(p.Project[:len(p.Output)], p.Output)}
	if p.Having != nil {
		nodes = append(nodes, "Filter (HAVING): "+p.Having.String())
	}
	if p.Aggregate {
		nodes = append(nodes, aggregateLine(&streamplan.Aggregation{KeyNames: p.KeyNames, Window: p.Window, Aggs: p.Aggs}))
	}
	if p.Filter != nil {
		nodes = append(nodes, "Filter: "+p.Filter.String())
	}
	if p.From == nil {
		in := p.Input
		var wmCol string
		var wmDelay int64
		if wm := in.Watermark; wm != nil {
			wmCol, wmDelay = wm.Column, wm.DelayMs
		}
		nodes = append(nodes, sourceLine(in.Name, in.Topic, in.PartitionKey, wmCol, wmDelay, in.Source != nil && in.Source.KafkaTimestamp))
	}
	out := strategyLines(p.Strategy, p.Rule, p.Reason, p.Estimate, p.Input.Name)
	for i, n := range nodes {
		out = append(out, treePrefix(i)+n)
	}
	if p.From != nil {
		out = append(out, relLines(p.From, len(nodes))...)
	}
	return out
}

func treePrefix(depth int) string {
	if depth == 0 {
		return ""
	}
	return strings.Repeat("   ", depth-1) + "└─ "
}

// relLines prints the FROM tree of a bounded query at depth.
func relLines(r *Rel, depth int) []string {
	p := treePrefix(depth)
	switch r.Kind {
	case RelOneRow:
		return []string{p + "One row (no FROM)"}
	case RelTopic:
		return []string{p + fmt.Sprintf("Source: %s (topic %s, read whole)", r.Relation.Name, r.Relation.Topic)}
	case RelVirtual:
		return []string{p + fmt.Sprintf("Catalog table: %s.%s", r.Virtual.Schema, r.Virtual.Name)}
	case RelFunc:
		return []string{p + "Function: " + r.Func}
	case RelDerived:
		out := []string{p + "Subquery"}
		for _, l := range explainBounded(r.Sub) {
			if strings.HasPrefix(l, "Strategy: ") {
				continue
			}
			out = append(out, strings.Repeat("   ", depth)+l)
		}
		return out
	case RelJoin:
		j := "Nested loop join (" + r.JoinType + ")"
		if r.On != nil {
			j += " on " + r.On.String()
		}
		out := []string{p + j}
		out = append(out, relLines(r.Left, depth+1)...)
		return append(out, relLines(r.Right, depth+1)...)
	}
	return []string{p + "?"}
}

func exprList(es []exec.Expr, out types.Schema) string { return streamplan.ExprList(es, out) }
