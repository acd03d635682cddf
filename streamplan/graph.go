// Package streamplan is the stream graph: the physical plan of a
// continuous query, what the planner emits and the runtime deploys.
//
// A stream is a graph of stages. A stage is what one consumer group runs:
// one task per partition of its input, each task a chain of operators
// (Stage.Ops) committed together. A stage reads one or more inputs (a
// join will read two): a relation's topic, or the far side of an
// exchange. An exchange moves rows between stages through an internal
// topic (a repartition hop re-keys raw records, a combine ships partial
// aggregates), with watermark markers from every sending partition so the
// receiving side knows how far all of them have got. Every internal topic
// is named by TopicName.
//
// Each operator is described by one typed spec (Op): what it reads and
// writes, never how it runs. The package is the contract between the
// planner and the runtime: it imports nothing of either (exec, types,
// window and agg carry the expressions, schemas, windows and aggregate
// functions the specs hold).
package streamplan

import (
	"github.com/turbinesql/turbinesql/agg"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/types"
	"github.com/turbinesql/turbinesql/window"
)

// Graph is one continuous query, planned.
type Graph struct {
	Stream string // the stream's name
	App    string // the app id its internal topics are named with
	// Strategy is how records move to their group; Rule is the planner
	// rule that chose it and Reason why (EXPLAIN prints all three).
	Strategy Strategy
	Rule     string
	Reason   string
	// Keyless: an aggregation by a window alone (a combine onto one merge
	// partition).
	Keyless bool
	// Estimate is what the cost rule measured (nil: it did not run).
	Estimate *Estimate
	// Guarantee is the stream's delivery guarantee; every stage of the
	// graph runs under it.
	Guarantee Guarantee
	// Stages in data-flow order: a stage comes after every stage it reads
	// from; the last writes the stream's output.
	Stages    []*Stage
	Exchanges []*Exchange
}

// StageID identifies a stage within its graph (its index in Stages).
type StageID int

// StageRole says what part of a stream a stage plays; the runtime names
// its consumer group, state and transactional ids from it.
type StageRole uint8

const (
	// RoleFinal is the stage that writes the stream's output; its
	// consumer group is StageGroup(app, stream).
	RoleFinal StageRole = iota + 1
	// RolePreAggregate pre-aggregates a combine's partials; its consumer
	// group is the combine topic.
	RolePreAggregate
	// RoleHop re-emits a relation's records onto a repartition topic; its
	// consumer group is the topic. One hop serves every stream of the app
	// with the same (input, key) that reads the same generation.
	RoleHop
)

var roleNames = []string{RoleFinal: "final", RolePreAggregate: "pre-aggregate", RoleHop: "hop"}

func (r StageRole) String() string { return enumString(roleNames, r, "StageRole") }

// Stage is what one consumer group runs: one task per input partition.
type Stage struct {
	ID   StageID
	Role StageRole
	// Group is the stage's consumer group; its changelog is
	// ChangelogTopic(Group).
	Group string
	// Inputs are what the stage reads, in order; the stage's tasks are
	// its first input's partitions.
	Inputs []Input
	// Ops are applied in order to every batch read; the first reads the
	// input, the last writes (a sink or an exchange).
	Ops []Op
	// Shared: the stage may already run for another stream (a repartition
	// hop): deploying the graph joins it rather than starting another.
	Shared bool
}

// InputKind tells what a stage reads.
type InputKind uint8

const (
	// FromRelation: a source's or a stream's topic.
	FromRelation InputKind = iota + 1
	// FromExchange: the internal topic of an exchange.
	FromExchange
)

// Input is one input of a stage.
type Input struct {
	Kind InputKind
	// Relation names the source or stream read (FromRelation); Topic is
	// its topic, or the exchange's (FromExchange).
	Relation string
	Topic    string
	// Exchange is the index in Graph.Exchanges (FromExchange).
	Exchange int
}

// ExchangeKind is how an exchange moves rows.
type ExchangeKind uint8

const (
	// ExchangeRepartition re-emits each record, with its original bytes
	// and timestamp, keyed and placed (murmur2) by a column.
	ExchangeRepartition ExchangeKind = iota + 1
	// ExchangeCombine ships partial accumulators per (window or slice,
	// group key), placed by the group key.
	ExchangeCombine
)

var exchangeNames = []string{ExchangeRepartition: "repartition", ExchangeCombine: "combine"}

func (k ExchangeKind) String() string { return enumString(exchangeNames, k, "ExchangeKind") }

// Progress is the protocol by which an exchange's receiving side learns
// how far the sending partitions have got.
type Progress uint8

const (
	// ProgressWatermarkMarkers: every sending partition sends a
	// watermark marker (shuffle.Marker) to every partition of the
	// internal topic; a receiving partition's watermark is the minimum
	// over the senders (a repartition hop).
	ProgressWatermarkMarkers Progress = iota + 1
	// ProgressWindowConfirmations: every sending partition confirms, with
	// the same markers, the windows it has shipped all its partials of; a
	// window closes once every sender has (a combine; partials of a
	// closed window are dropped and counted).
	ProgressWindowConfirmations
)

var progressNames = []string{ProgressWatermarkMarkers: "watermark markers", ProgressWindowConfirmations: "window confirmations"}

func (p Progress) String() string { return enumString(progressNames, p, "Progress") }

// Exchange moves rows from one stage to another through an internal topic.
type Exchange struct {
	Kind ExchangeKind
	// Topic is the internal topic (TopicName).
	Topic string
	// Key is what records are keyed and placed by: the repartition
	// column, or a combine's group key columns (none: keyless, one
	// partition).
	Key []string
	// Partitions is the internal topic's declared partition count
	// (repartition_partitions, combine_partitions); 0: as many as the
	// sending stage's input has.
	Partitions int
	// PartitionsOption names the WITH option that sets Partitions.
	PartitionsOption string
	Progress         Progress
	// Sources is the relation whose partitions send (their markers are
	// counted per source partition).
	Source   string
	From, To StageID
}

// Window is the event-time window of a GROUP BY.
type Window struct {
	TimeCol string
	TimeIdx int   // input column of event time
	SizeMs  int64 // the window's length; SESSION: the gap
	Spec    window.Spec
}

// Kind is the window's kind.
func (w *Window) Kind() WindowKind { return w.Spec.Kind }

// AggCall is one aggregate of a query.
type AggCall struct {
	Spec agg.Spec
	Args []exec.Expr // over the input
	Type types.Type
	Text string // as EXPLAIN prints it: count(1), sum(amount)
}

// Estimate is what the cost rule compares: what each hop would move
// through the broker for a sample of the source, measured by running both
// on it (the caller does; the planner reads no Kafka).
type Estimate struct {
	SampleRows int64 // rows decoded from the sample (the last records of each partition)
	Partitions int   // source partitions sampled
	Windows    int64 // distinct (partition, window) pairs in the sample
	// KeysPerWindowPartition: distinct group keys per window per source
	// partition, the number of partials combine ships for each.
	KeysPerWindowPartition float64
	RowsPerWindow          float64 // rows per window, all partitions together
	RepartitionRecords     int64   // records the repartition hop would re-emit
	RepartitionBytes       int64
	CombineRecords         int64 // partials the combine hop would ship
	CombineBytes           int64
	EventsPerSecond        float64 // rate of the sample in event time (0: unknown)
	// SourceStats describes the statistics kept for the source (its rate
	// and the grouping column's cardinality), for EXPLAIN.
	SourceStats string
}

// Final is the stage that writes the stream's output.
func (g *Graph) Final() *Stage {
	for _, s := range g.Stages {
		if s.Role == RoleFinal {
			return s
		}
	}
	return nil
}

// Stage is the stage of role r (nil: none).
func (g *Graph) Stage(r StageRole) *Stage {
	for _, s := range g.Stages {
		if s.Role == r {
			return s
		}
	}
	return nil
}

// Exchange is the graph's exchange of kind k (nil: none).
func (g *Graph) Exchange(k ExchangeKind) *Exchange {
	for _, e := range g.Exchanges {
		if e.Kind == k {
			return e
		}
	}
	return nil
}

// Sink is the spec of the graph's output.
func (g *Graph) Sink() *SinkSpec {
	if f := g.Final(); f != nil {
		return Find[*SinkSpec](f.Ops)
	}
	return nil
}

// Topics are the internal topics the graph's exchanges use and the
// changelogs of its stages, in stage order.
func (g *Graph) Topics() []string {
	var out []string
	for _, e := range g.Exchanges {
		out = append(out, e.Topic)
	}
	for _, s := range g.Stages {
		out = append(out, ChangelogTopic(s.Group))
	}
	return out
}
