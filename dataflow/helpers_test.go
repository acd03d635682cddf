package dataflow_test

import (
	"context"
	"testing"
	"time"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/streamplan"
	// The tests are the package's own, in package dataflow_test only
	// because optest imports dataflow: they name its types as it does.
	. "github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/dataflow/optest"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/types"
)

// The operator tests drive each operator, or a stage's chain, through the
// runtime's task loop with dataflow/optest: batches in, watermarks, commits,
// crashes and restarts, and what became visible in Kafka read back. They
// plan their operators from SQL over one source, ev.

var evSource = &catalog.Source{Name: "ev", Topic: "ev", PartitionKey: "k", OnError: streamplan.OnErrorFail,
	Schema:    types.Schema{{Name: "k", Type: types.Text}, {Name: "u", Type: types.Text}, {Name: "v", Type: types.Int}, {Name: "ts", Type: types.Timestamp}},
	Watermark: &catalog.Watermark{Column: "ts"}}

// evFormat: ev's records are JSON rows keyed by k; a row literal
// "a,x,1,5" is k a, u x, v 1, ts 00:00:05.
var evFormat = optest.Format{Schema: evSource.Schema, Key: "k"}

func evRelation(src *catalog.Source) *catalog.Relation {
	return &catalog.Relation{Name: src.Name, Topic: src.Topic, Schema: src.Schema, PartitionKey: src.PartitionKey, Watermark: src.Watermark, Source: src}
}

type resolver map[string]*catalog.Relation

func (r resolver) Relation(name string) (*catalog.Relation, bool) { rel, ok := r[name]; return rel, ok }

// planOf plans a CREATE STREAM over evSource.
func planOf(t testing.TB, text, strategy string) *planner.Plan {
	t.Helper()
	stmt, err := sql.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	cs := stmt.(*sql.CreateStream)
	requested := streamplan.StrategyAuto
	if strategy != "" {
		if requested, err = streamplan.ParseStrategy(strategy); err != nil {
			t.Fatal(err)
		}
	}
	p, err := planner.BuildStream(resolver{"ev": evRelation(evSource)}, cs.Query, text, requested)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// chain is a harness option: the chain every task runs.
func chain(ops func() []Op) func(*optest.Config) {
	return func(c *optest.Config) { c.Ops = func(int32) []Op { return ops() } }
}

// evHarness runs a stage reading ev's parts partitions (a scripted
// watermark unless an option says otherwise).
func evHarness(t testing.TB, parts int, opts ...func(*optest.Config)) *optest.Harness {
	t.Helper()
	cfg := optest.Config{Topic: "ev", Partitions: parts, Input: evFormat, Watermarks: optest.Scripted}
	for _, o := range opts {
		o(&cfg)
	}
	return optest.New(t, cfg)
}

// ev makes records of ev's partition p from row literals, at offsets from
// off.
func ev(p int32, off int64, rows ...string) []*kafkaio.Record {
	recs, err := evFormat.Records("ev", p, off, rows...)
	if err != nil {
		panic(err)
	}
	return recs
}

// values decodes produced JSON values.
func values(t testing.TB, recs optest.Output) []map[string]any {
	t.Helper()
	out, err := recs.Values()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

const tumbleSQL = `CREATE STREAM s AS SELECT k, TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n, SUM(v) AS total
	FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '10' SECOND)`

func aggChain(p *planner.Plan, late string, emitEvery time.Duration) []Op {
	schema := p.Output
	if emitEvery > 0 {
		schema = append(append(types.Schema{}, schema...), types.Field{Name: "is_final", Type: types.Bool})
	}
	return []Op{
		&Source{Input: p.Input, TimeIdx: p.Window.TimeIdx, CountIn: true, DLQ: dlqOne},
		&HashAgg{Plan: p, LateDataTopic: late, EmitEvery: emitEvery, DLQ: dlqOne},
		&Project{Filter: p.Having, Exprs: p.Project, AddFinal: emitEvery > 0},
		&Sink{Topic: "out", Partitions: 4, Schema: schema},
	}
}

// dlqOne: every dead-letter or late-data topic has one partition.
func dlqOne(context.Context, string) int { return 1 }

// onErrorOf reads an on_error policy's SQL spelling.
func onErrorOf(t *testing.T, s string) streamplan.OnError {
	t.Helper()
	o, err := streamplan.ParseOnError(s)
	if err != nil {
		t.Fatal(err)
	}
	return o
}
