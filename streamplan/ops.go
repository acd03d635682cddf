package streamplan

import (
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/types"
)

// OpKind names an operator spec's kind.
type OpKind uint8

const (
	OpDecode OpKind = iota + 1
	OpPlacementCheck
	OpFilter
	OpProject
	OpHashAggregate
	OpPartialAggregate
	OpMerge
	OpExchange
	OpSink
)

var opNames = []string{OpDecode: "decode", OpPlacementCheck: "placement check", OpFilter: "filter", OpProject: "project",
	OpHashAggregate: "hash aggregate", OpPartialAggregate: "partial aggregate", OpMerge: "merge", OpExchange: "exchange", OpSink: "sink"}

func (k OpKind) String() string { return enumString(opNames, k, "OpKind") }

// Op is the spec of one operator of a stage: what the runtime builds an
// operator from (one builder per kind). Joins and changelog operators add
// kinds of their own; a spec reading two inputs names them by their index
// in Stage.Inputs.
type Op interface {
	Kind() OpKind
}

// Find is the first spec of type T among ops (zero: none).
func Find[T Op](ops []Op) T {
	for _, o := range ops {
		if t, ok := o.(T); ok {
			return t
		}
	}
	var zero T
	return zero
}

// DecodeSpec turns the Kafka records of a relation into batch rows: the
// stage's ingest path, with the source's on_error policy.
type DecodeSpec struct {
	Relation string // the source or stream
	Topic    string
	// Source: the relation is a source (a stream's output has no on_error
	// of its own: its bad records fail the reader).
	Source  bool
	Format  string // json
	Columns types.Schema
	// PartitionKey is the column the relation's records are placed by
	// ("": not declared).
	PartitionKey string
	// EventTime is the index of the column the stage takes event time
	// from (-1: none): the WATERMARK's column, or the window's time
	// column. WatermarkColumn is the relation's WATERMARK column ("":
	// none), the watermark trailing its maximum by WatermarkDelayMs.
	// KafkaTimestamp: the column is each record's Kafka timestamp, not a
	// field.
	EventTime        int
	EventTimeColumn  string
	WatermarkColumn  string
	WatermarkDelayMs int64
	KafkaTimestamp   bool
	IdleTimeoutMs    int64
	// TimeRequired: a row without an event time has no window; the
	// source's on_error handles it.
	TimeRequired bool
	OnError      OnError
	DLQTopic     string
	// FromExchange: the records come through a repartition hop (original
	// bytes, with the hop's markers between them).
	FromExchange bool
	// Misplaced, when set, says how it is known that the relation's
	// records do not sit where murmur2 on PartitionKey puts them (a
	// stream's placement check saw it): EXPLAIN says whether the plan
	// relies on their placement.
	Misplaced string
	// NeedsSeq: each row carries its input position after its columns
	// (order-sensitive aggregates).
	NeedsSeq bool
}

func (*DecodeSpec) Kind() OpKind { return OpDecode }

// PlacementCheckSpec samples each batch's partition keys and reports
// whether records sit where murmur2 puts them (a local aggregation relies
// on it).
type PlacementCheckSpec struct {
	Key      string // the partition key column
	KeyIdx   int
	Declared bool // partition_hash = 'murmur2' declared
}

func (*PlacementCheckSpec) Kind() OpKind { return OpPlacementCheck }

// FilterRole tells a WHERE from a HAVING.
type FilterRole uint8

const (
	FilterWhere  FilterRole = iota + 1 // over the input rows
	FilterHaving                       // over the aggregated rows
)

// FilterSpec keeps the rows for which Predicate is true. A WHERE right
// before an aggregating spec may be applied by the aggregation itself (it
// selects the rows it folds in), as the runtime's aggregator does.
type FilterSpec struct {
	Role      FilterRole
	Predicate exec.Expr
}

func (*FilterSpec) Kind() OpKind { return OpFilter }

// ProjectSpec computes the output row.
type ProjectSpec struct {
	Exprs  []exec.Expr // over the input (or the aggregated) row
	Output types.Schema
	// AddFinal appends the is_final column (EMIT EVERY).
	AddFinal bool
	// Tombstones: a group that stops satisfying HAVING is deleted with a
	// tombstone of its key (an upsert stream keyed by its group key).
	Tombstones bool
}

func (*ProjectSpec) Kind() OpKind { return OpProject }

// Aggregation is what the three aggregating specs share: the grouping,
// the window and the aggregates.
type Aggregation struct {
	Keys     []exec.Expr // over the input
	KeyNames []string
	// PartitionKey is the index in Keys of the key the stage's input is
	// partitioned by (-1: none).
	PartitionKey int
	Window       *Window // nil: no window (an upsert aggregation)
	Aggs         []AggCall
	NeedsSeq     bool
}

// HashAggSpec aggregates rows into groups (window, keys) held in keyed
// state and emits each window's groups when the watermark passes its end
// (+ allowed lateness), or each changed group at every commit without a
// window.
type HashAggSpec struct {
	Aggregation
	AllowedLatenessMs int64
	LateDataTopic     string // "": late rows are dropped and counted
	EmitEveryMs       int64  // early fires of open windows (0: none)
	StateTTLMs        int64  // upsert groups not updated this long are forgotten (0: never)
}

func (*HashAggSpec) Kind() OpKind { return OpHashAggregate }

// PartialAggSpec pre-aggregates each input partition's rows per (window
// or slice, key) and ships the partial accumulators on the exchange when
// its own watermark passes their end.
type PartialAggSpec struct {
	Aggregation
	Exchange    int // index in Graph.Exchanges
	EmitEveryMs int64
}

func (*PartialAggSpec) Kind() OpKind { return OpPartialAggregate }

// MergeSpec merges the partials a combine ships per (window, key) and
// emits a window once every sending partition has confirmed it.
type MergeSpec struct {
	Aggregation
	EmitEveryMs int64
}

func (*MergeSpec) Kind() OpKind { return OpMerge }

// ExchangeSpec writes the stage's records to an exchange (a repartition
// hop's sending side: each record re-emitted, keyed by By).
type ExchangeSpec struct {
	Exchange int // index in Graph.Exchanges
	By       string
}

func (*ExchangeSpec) Kind() OpKind { return OpExchange }

// SinkSpec writes the output rows to the stream's topic.
type SinkSpec struct {
	Stream string
	Topic  string
	Format string // json
	// MessageKey is the output column records are keyed by (message_key;
	// ""), KeyColumn the column they are placed by (the message key, or a
	// single group key output unchanged; "": not keyed by a column).
	MessageKey string
	KeyColumn  string
	Output     types.Schema
	// Partitions is the declared count of the output topic (0: as the
	// topic is, or as many as the input).
	Partitions int
	Guarantee  Guarantee
	// OnError and DLQTopic are the input source's: what to do with a row
	// the output topic cannot take (fail for a stream's output).
	OnError  OnError
	DLQTopic string
}

func (*SinkSpec) Kind() OpKind { return OpSink }
