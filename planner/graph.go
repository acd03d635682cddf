package planner

import (
	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/streamplan"
)

// Rule names the planner's placement rules print (Plan.Rule).
const (
	RuleLocalPartitionKey = "LocalPartitionKey"
	RuleRepartitionByKey  = "RepartitionByKey"
	RuleMisplacedInput    = "MisplacedInput"
	RuleKeylessCombine    = "KeylessCombine"
	RuleStrategyOption    = "StrategyOption"
	RuleCostModel         = "CostModel"
	RuleStateless         = "Stateless"
)

// Checked reports whether a plan keeps keyed state over its input's
// partitions as Kafka placed them (a local aggregation whose GROUP BY
// holds the partition key): the plans the placement check, the partition
// count history and the start-up cleanup are for.
func Checked(p *Plan) bool {
	return p.Aggregate && p.PartitionKey >= 0 && p.Strategy == streamplan.StrategyLocal &&
		p.Input.PartitionKey != "" && p.Input.Schema.Index(p.Input.PartitionKey) >= 0
}

// BuildGraph is the stream graph of stream def planned as p, its internal
// topics named for app. A repartition stream reads def.Hop (the hop
// generation its catalog record names; "": the first).
//
// The stages, by strategy:
//
//	stateless, local: final [decode, (placement check), (filter), (aggregate, (having)), project, sink]
//	repartition:      hop [decode, exchange] → final [decode, (filter), aggregate, (having), project, sink]
//	combine:          pre-aggregate [decode, (filter), partial aggregate] → final [merge, (having), project, sink]
func BuildGraph(def *catalog.Stream, p *Plan, app string) *streamplan.Graph {
	g := &streamplan.Graph{Stream: def.Name, App: app, Strategy: p.Strategy, Rule: p.Rule, Reason: p.Reason,
		Estimate: p.Estimate, Guarantee: def.Options.Guarantee, Keyless: p.Aggregate && len(p.Keys) == 0}
	in := p.Input
	src := &streamplan.Input{Kind: streamplan.FromRelation, Relation: in.Name, Topic: in.Topic}
	evt := inputEventTime(p)
	needTime := p.Window != nil && in.Source != nil
	decode := func(eventTime int) *streamplan.DecodeSpec {
		d := &streamplan.DecodeSpec{Relation: in.Name, Topic: in.Topic, Source: in.Source != nil, Format: "json", Columns: in.Schema,
			PartitionKey: in.PartitionKey, EventTime: eventTime, NeedsSeq: p.NeedsSeq, TimeRequired: needTime,
			IdleTimeoutMs: catalog.DefaultIdleTimeoutMs, Misplaced: in.Misplaced}
		if eventTime >= 0 {
			d.EventTimeColumn = in.Schema[eventTime].Name
		}
		if wm := in.Watermark; wm != nil {
			d.WatermarkColumn, d.WatermarkDelayMs = wm.Column, wm.DelayMs
		}
		if s := in.Source; s != nil {
			d.Format, d.OnError, d.DLQTopic, d.KafkaTimestamp = s.Format, s.OnError, s.DLQTopic, s.KafkaTimestamp
			if s.IdleTimeoutMs > 0 {
				d.IdleTimeoutMs = s.IdleTimeoutMs
			}
		}
		return d
	}
	aggregation := streamplan.Aggregation{Keys: p.Keys, KeyNames: p.KeyNames, PartitionKey: p.PartitionKey,
		Window: p.Window, Aggs: p.Aggs, NeedsSeq: p.NeedsSeq}
	var where []streamplan.Op
	if p.Filter != nil {
		where = []streamplan.Op{&streamplan.FilterSpec{Role: streamplan.FilterWhere, Predicate: p.Filter}}
	}
	// tail is what follows the aggregation (or the WHERE): HAVING, the
	// select list, the sink.
	tail := func() []streamplan.Op {
		var ops []streamplan.Op
		if p.Having != nil {
			ops = append(ops, &streamplan.FilterSpec{Role: streamplan.FilterHaving, Predicate: p.Having})
		}
		out, final := p.Output, def.Options.EmitEveryMs > 0 && p.Aggregate
		n := len(out)
		if final {
			n-- // is_final comes from the aggregation, not from an expression
		}
		ops = append(ops, &streamplan.ProjectSpec{Exprs: p.Project[:n], Output: out, AddFinal: final,
			Tombstones: p.Aggregate && p.Window == nil && def.Options.MessageKey == ""})
		sink := &streamplan.SinkSpec{Stream: def.Name, Topic: def.Topic, Format: "json", MessageKey: def.Options.MessageKey,
			KeyColumn: def.KeyColumn, Output: out, Partitions: def.Partitions, Guarantee: def.Options.Guarantee}
		if s := in.Source; s != nil {
			sink.OnError, sink.DLQTopic = s.OnError, s.DLQTopic
		}
		return append(ops, sink)
	}
	hashAgg := func() streamplan.Op {
		return &streamplan.HashAggSpec{Aggregation: aggregation, AllowedLatenessMs: def.Options.AllowedLatenessMs,
			LateDataTopic: def.Options.LateDataTopic, EmitEveryMs: def.Options.EmitEveryMs, StateTTLMs: def.Options.StateTTLMs}
	}
	final := &streamplan.Stage{Role: streamplan.RoleFinal, Group: streamplan.StageGroup(app, def.Name)}
	switch p.Strategy {
	case streamplan.StrategyRepartition:
		x := &streamplan.Exchange{Kind: streamplan.ExchangeRepartition, Topic: repartitionTopic(def, p, app), Key: []string{p.RepartitionBy},
			Partitions: def.Options.RepartitionPartitions, PartitionsOption: "repartition_partitions",
			Progress: streamplan.ProgressWatermarkMarkers, Source: in.Name}
		hop := &streamplan.Stage{Role: streamplan.RoleHop, Group: x.Topic, Shared: true, Inputs: []streamplan.Input{*src},
			Ops: []streamplan.Op{decode(evt), &streamplan.ExchangeSpec{Exchange: 0, By: p.RepartitionBy}}}
		// The hop's records keep their bytes: the final stage decodes
		// them again; event time comes with the hop's markers.
		d := decode(-1)
		d.FromExchange = true
		final.Inputs = []streamplan.Input{{Kind: streamplan.FromExchange, Topic: x.Topic, Exchange: 0}}
		final.Ops = append(append([]streamplan.Op{d}, where...), hashAgg())
		final.Ops = append(final.Ops, tail()...)
		g.Stages, g.Exchanges = []*streamplan.Stage{hop, final}, []*streamplan.Exchange{x}
	case streamplan.StrategyCombine:
		x := &streamplan.Exchange{Kind: streamplan.ExchangeCombine, Topic: streamplan.CombineTopic(app, in.Topic, def.Name), Key: p.KeyNames,
			Partitions: def.Options.CombinePartitions, PartitionsOption: "combine_partitions",
			Progress: streamplan.ProgressWindowConfirmations, Source: in.Name}
		if g.Keyless {
			x.Partitions = 1 // every partial of a window has the same (empty) key
		}
		pre := &streamplan.Stage{Role: streamplan.RolePreAggregate, Group: x.Topic, Inputs: []streamplan.Input{*src}}
		pre.Ops = append(append([]streamplan.Op{decode(p.Window.TimeIdx)}, where...),
			&streamplan.PartialAggSpec{Aggregation: aggregation, Exchange: 0, EmitEveryMs: def.Options.EmitEveryMs})
		final.Inputs = []streamplan.Input{{Kind: streamplan.FromExchange, Topic: x.Topic, Exchange: 0}}
		final.Ops = append([]streamplan.Op{&streamplan.MergeSpec{Aggregation: aggregation, EmitEveryMs: def.Options.EmitEveryMs}}, tail()...)
		g.Stages, g.Exchanges = []*streamplan.Stage{pre, final}, []*streamplan.Exchange{x}
	default:
		final.Inputs = []streamplan.Input{*src}
		final.Ops = []streamplan.Op{decode(evt)}
		if Checked(p) {
			final.Ops = append(final.Ops, &streamplan.PlacementCheckSpec{Key: in.PartitionKey, KeyIdx: in.Schema.Index(in.PartitionKey),
				Declared: in.Source != nil && in.Source.PartitionHash == "murmur2"})
		}
		final.Ops = append(final.Ops, where...)
		if p.Aggregate {
			final.Ops = append(final.Ops, hashAgg())
		}
		final.Ops = append(final.Ops, tail()...)
		g.Stages = []*streamplan.Stage{final}
	}
	for i, st := range g.Stages {
		st.ID = streamplan.StageID(i)
	}
	for _, x := range g.Exchanges {
		x.From, x.To = 0, 1
	}
	return g
}

// repartitionTopic is the hop generation a repartition stream reads: its
// catalog record's, else the first.
func repartitionTopic(def *catalog.Stream, p *Plan, app string) string {
	if def.Hop != "" {
		return def.Hop
	}
	return streamplan.RepartitionTopic(app, p.Input.Topic, []string{p.RepartitionBy})
}

// inputEventTime is the event-time column of a plan's input (-1: none):
// its WATERMARK's column, or the window's time column, which is event
// time even without a WATERMARK clause.
func inputEventTime(p *Plan) int {
	idx := -1
	if wm := p.Input.Watermark; wm != nil {
		idx = p.Input.Schema.Index(wm.Column)
	}
	if p.Window != nil && idx != p.Window.TimeIdx {
		idx = p.Window.TimeIdx
	}
	return idx
}
