package sql

import (
	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/turbinesql/turbinesql/types"
)

// Statement is one parsed statement of the TurbineSQL dialect.
type Statement interface{ statement() }

// CreateSource declares a Kafka topic as a relation.
type CreateSource struct {
	Name        string
	IfNotExists bool
	Columns     []ColumnDef
	Watermark   *Watermark
	Options     Options
}

// ColumnDef is one column of a source.
type ColumnDef struct {
	Name string
	Type types.Type
	Pos  int
	// Declared is the type as written (NUMERIC(10,2)), for messages about
	// a declared type the engine reads as another.
	Declared string
}

// Watermark is `WATERMARK FOR col AS col - INTERVAL ...`.
type Watermark struct {
	Column  string
	DelayMs int64
	Pos     int
}

// CreateStream starts a continuous query.
type CreateStream struct {
	Name        string
	IfNotExists bool
	Options     Options
	Query       *ast.SelectStmt
	QueryText   string // the SELECT as the user wrote it
	QueryPos    int    // byte offset of the SELECT in the statement
	// EmitEveryMs: EMIT EVERY INTERVAL ... (processing time): open windows
	// are also emitted this often, marked not final. 0: only at close.
	EmitEveryMs int64
}

// Insert writes rows to a source's topic.
type Insert struct {
	Table   string
	Columns []string
	Rows    [][]ast.ExprNode
}

// Select is a bounded query: one SELECT (Stmt) or a UNION/EXCEPT/INTERSECT
// of SELECTs (SetOpr).
type Select struct {
	Stmt   *ast.SelectStmt
	SetOpr *ast.SetOprStmt
}

// Flush waits for every running stream to process what was written before it.
type Flush struct{}

// Show is SHOW SOURCES, SHOW STREAMS or SHOW <variable>.
type Show struct{ What string }

// ShowPartitions is SHOW PARTITIONS stream: per input partition, the
// producer-placement check, its count history and transition window, the
// key groups it owns and its lag.
type ShowPartitions struct{ Stream string }

// ShowTasks is SHOW TASKS stream: per stage and input partition, the
// process of the app that runs its task.
type ShowTasks struct{ Stream string }

// ShowCreate is SHOW CREATE STREAM|SOURCE name: the statement that
// re-creates the relation as it is now.
type ShowCreate struct {
	Kind string // "STREAM" or "SOURCE"
	Name string
}

// Describe is DESCRIBE name.
type Describe struct{ Name string }

// Drop is DROP STREAM|SOURCE [IF EXISTS] name [DELETE TOPIC].
type Drop struct {
	Kind     string // "STREAM" or "SOURCE"
	Name     string
	IfExists bool
	// DeleteTopic (ksqlDB's DELETE TOPIC): the stream's output topic and
	// internal topics go with it.
	DeleteTopic bool
	// Cascade (PostgreSQL's CASCADE): the streams reading it, and those
	// reading them, are dropped first. RESTRICT, the default, refuses.
	Cascade bool
}

// AlterStream is ALTER STREAM name {RESTART | STOP | START | SET (option
// = value, ...)}.
type AlterStream struct {
	Name   string
	Action AlterAction
	// Options are SET's (the plan's options: strategy,
	// repartition_partitions, combine_partitions).
	Options Options
}

// AlterAction is what ALTER STREAM does.
type AlterAction string

const (
	// AlterRestart starts a failed stream again from its state, once its
	// cause is fixed (this server only).
	AlterRestart AlterAction = "RESTART"
	// AlterStop stops the stream on every server of the app, and it stays
	// stopped across restarts, until START: the way to rescale its state
	// while the rest of the app runs.
	AlterStop AlterAction = "STOP"
	// AlterStart runs a stopped stream again, on every server.
	AlterStart AlterAction = "START"
	// AlterSet re-plans the stream with new plan options (strategy =
	// 'repartition' for a local stream whose input is misplaced): it is
	// computed again from its input's start under the new plan.
	AlterSet AlterAction = "SET"
)

// AlterSource is ALTER SOURCE name SET (option = value, ...): the options
// a source may change while streams read it (on_error, dlq_topic,
// idle_timeout, and partitions, which grows the topic).
type AlterSource struct {
	Name    string
	Options Options
}

// Explain is EXPLAIN <statement>.
type Explain struct{ Stmt Statement }

// Noop is a statement accepted for client compatibility with no effect:
// BEGIN, COMMIT, ROLLBACK, SET. Tag is the command tag to answer with.
type Noop struct{ Tag string }

func (*CreateSource) statement()   {}
func (*CreateStream) statement()   {}
func (*Insert) statement()         {}
func (*Select) statement()         {}
func (*Flush) statement()          {}
func (*ShowCreate) statement()     {}
func (*Show) statement()           {}
func (*Describe) statement()       {}
func (*ShowPartitions) statement() {}
func (*ShowTasks) statement()      {}
func (*Drop) statement()           {}
func (*AlterStream) statement()    {}
func (*AlterSource) statement()    {}
func (*Explain) statement()        {}
func (*Noop) statement()           {}
