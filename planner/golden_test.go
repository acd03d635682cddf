package planner

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/streamplan"
)

// TestGraphGolden runs the datadriven files in testdata/graph against an
// in-memory catalog: no server, no broker. Directives:
//
//	source                      CREATE SOURCE ...; adds the source (planner.SourceFrom)
//	stream                      CREATE STREAM ...; plans it and adds it (a later stream may read it)
//	misplaced rel=<name> why=<text with _ for spaces>
//	                            the relation's records are known misplaced (a stream's placement check saw it)
//	plan [app=..] [recorded=..] [estimate=(...)]
//	                            CREATE STREAM ...; prints the stream graph
//	explain [app=..] [recorded=..] [estimate=(...)] [hop=<topic>]
//	                            CREATE STREAM ... or SELECT ...; prints EXPLAIN's text
//
// An error prints as "error <SQLSTATE>: message" with its hint.
// estimate=(rows, partitions, rows per window, keys per window per
// partition, repartition records, repartition bytes, combine records,
// combine bytes) is what the cost rule is told the sample measured;
// estimate=none: the sample could not be read. The app defaults to
// "golden". go test ./planner -run TestGraphGolden -rewrite rewrites the
// expected output.
func TestGraphGolden(t *testing.T) {
	datadriven.Walk(t, "testdata/graph", func(t *testing.T, path string) {
		cat := catalog.New(nil)
		misplaced := map[string]string{}
		res := misplacedResolver{cat: cat, misplaced: misplaced}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "source":
				st, err := sql.Parse(d.Input)
				if err != nil {
					return errText(err)
				}
				cs, ok := st.(*sql.CreateSource)
				if !ok {
					d.Fatalf(t, "source takes a CREATE SOURCE, not %T", st)
				}
				src, err := SourceFrom(cs, d.Input)
				if err != nil {
					return errText(err)
				}
				if err := cat.AddSource(src, false); err != nil {
					return errText(err)
				}
				return "ok"
			case "misplaced":
				var rel, why string
				d.ScanArgs(t, "rel", &rel)
				d.ScanArgs(t, "why", &why)
				misplaced[rel] = strings.ReplaceAll(why, "_", " ")
				return "ok"
			case "stream", "plan", "explain":
				st, err := sql.Parse(d.Input)
				if err != nil {
					return errText(err)
				}
				if sel, ok := st.(*sql.Select); ok && d.Cmd == "explain" {
					var node ast.ResultSetNode = sel.Stmt
					if sel.SetOpr != nil {
						node = sel.SetOpr
					}
					p, err := BuildNode(cat, node, d.Input)
					if err != nil {
						return errText(err)
					}
					return strings.Join(ExplainQuery(p), "\n") + "\n"
				}
				cs, ok := st.(*sql.CreateStream)
				if !ok {
					d.Fatalf(t, "%s takes a CREATE STREAM, not %T", d.Cmd, st)
				}
				env := streamEnv(t, d)
				s, err := PlanStream(res, cs, d.Input, env)
				if err != nil {
					return errText(err)
				}
				if d.HasArg("hop") {
					d.ScanArgs(t, "hop", &s.Def.Hop)
				}
				g := s.Graph(env.App)
				switch d.Cmd {
				case "stream":
					if err := cat.AddStream(s.Def, false); err != nil {
						return errText(err)
					}
					return "ok"
				case "plan":
					return g.String()
				}
				return strings.Join(ExplainStream(g), "\n") + "\n"
			}
			d.Fatalf(t, "unknown directive %s", d.Cmd)
			return ""
		})
	})
}

// misplacedResolver marks the relations known misplaced, as the server's
// resolver does for a new statement.
type misplacedResolver struct {
	cat       *catalog.Catalog
	misplaced map[string]string
}

func (r misplacedResolver) Relation(name string) (*catalog.Relation, bool) {
	rel, ok := r.cat.Relation(name)
	if ok {
		rel.Misplaced = r.misplaced[name]
	}
	return rel, ok
}

func streamEnv(t *testing.T, d *datadriven.TestData) StreamEnv {
	env := StreamEnv{App: "golden"}
	if d.HasArg("app") {
		d.ScanArgs(t, "app", &env.App)
	}
	if d.HasArg("recorded") {
		var rec string
		d.ScanArgs(t, "recorded", &rec)
		s, err := streamplan.ParseRecorded(rec)
		if err != nil {
			d.Fatalf(t, "recorded: %v", err)
		}
		env.Recorded = s
	}
	for _, a := range d.CmdArgs {
		if a.Key != "estimate" {
			continue
		}
		if len(a.Vals) == 1 && a.Vals[0] == "none" {
			env.Estimate = func(*Plan) *Estimate { return nil }
			continue
		}
		if len(a.Vals) != 8 {
			d.Fatalf(t, "estimate takes 8 values, got %d", len(a.Vals))
		}
		n := make([]float64, 8)
		for i, v := range a.Vals {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				d.Fatalf(t, "estimate: %v", err)
			}
			n[i] = f
		}
		e := &Estimate{SampleRows: int64(n[0]), Partitions: int(n[1]), RowsPerWindow: n[2], KeysPerWindowPartition: n[3],
			RepartitionRecords: int64(n[4]), RepartitionBytes: int64(n[5]), CombineRecords: int64(n[6]), CombineBytes: int64(n[7])}
		env.Estimate = func(*Plan) *Estimate { c := *e; return &c }
	}
	return env
}

// errText prints an error with its SQLSTATE and hint.
func errText(err error) string {
	var se *sql.Error
	if !errors.As(err, &se) {
		return fmt.Sprintf("error (no SQLSTATE): %v\n", err)
	}
	out := fmt.Sprintf("error %s: %s\n", se.Code, se.Message)
	if se.HintMsg != "" {
		out += "HINT: " + se.HintMsg + "\n"
	}
	return out
}
