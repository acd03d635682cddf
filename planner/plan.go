// Package planner turns a parsed SELECT into a physical plan: which input it
// reads, the filter, the grouping and window, the aggregates, the final
// projection, and how records must move so each group is computed in one
// place (the strategy, chosen by a named rule). EXPLAIN prints it.
package planner

import (
	"fmt"
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"
	driver "github.com/pingcap/tidb/pkg/parser/test_driver"

	"github.com/turbinesql/turbinesql/agg"
	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/streamplan"
	"github.com/turbinesql/turbinesql/types"
	"github.com/turbinesql/turbinesql/window"
)

// groupWindow reads TUMBLE(ts, size), HOP(ts, slide, size) or
// SESSION(ts, gap) in a GROUP BY.
func (in *scope) groupWindow(as *aggScope, call *ast.FuncCallExpr, name string) error {
	wk, err := streamplan.ParseWindowKind(name)
	if err != nil {
		return err
	}
	kind := wk.String()
	lower := strings.ToLower(kind)
	pos := sql.FindPos(in.src, lower)
	if as.window != nil {
		return sql.Errorf(sql.CodeNotSupported, "only one window per GROUP BY").WithPos(pos)
	}
	usage := map[streamplan.WindowKind]string{streamplan.Tumble: "(time_column, INTERVAL size)", streamplan.Hop: "(time_column, INTERVAL slide, INTERVAL size)",
		streamplan.Session: "(time_column, INTERVAL gap)"}[wk]
	want := strings.Count(usage, ",") + 1
	if len(call.Args) != want {
		return sql.Errorf(sql.CodeSyntax, "%s takes %s", kind, usage).WithPos(pos)
	}
	col, ok := call.Args[0].(*ast.ColumnNameExpr)
	if !ok {
		return sql.Errorf(sql.CodeNotSupported, "%s's first argument must be a TIMESTAMP column", kind).WithPos(pos)
	}
	idx := in.input.Index(col.Name.Name.O)
	if idx < 0 {
		return in.errf(sql.CodeUndefinedColumn, col.Name.Name.O, "column %q does not exist", col.Name.Name.O)
	}
	if in.input[idx].Type != types.Timestamp {
		return in.errf(sql.CodeDatatypeMismatch, col.Name.Name.O, "%s needs a TIMESTAMP column; %s is %s", kind, col.Name.Name.O, in.input[idx].Type)
	}
	lens := make([]int64, 0, 2)
	for _, a := range call.Args[1:] {
		c := innerCall(a)
		n, err := intArg(c, 0)
		if err != nil || c == nil || strings.ToUpper(c.FnName.O) != strings.ToUpper(sql.IntervalFunc) {
			return sql.Errorf(sql.CodeSyntax, "%s's lengths must be INTERVALs, e.g. INTERVAL '1' MINUTE; it takes %s", kind, usage).WithPos(pos)
		}
		if n <= 0 {
			return sql.Errorf(sql.CodeInvalidParameter, "%s lengths must be positive", kind).WithPos(pos)
		}
		lens = append(lens, n)
	}
	ws := &WindowSpec{TimeCol: in.input[idx].Name, TimeIdx: idx}
	switch wk {
	case streamplan.Tumble:
		ws.SizeMs, ws.Spec = lens[0], window.Spec{Kind: window.Tumble, Size: lens[0]}
	case streamplan.Hop:
		ws.SizeMs, ws.Spec = lens[1], window.Spec{Kind: window.Hop, Slide: lens[0], Size: lens[1]}
	case streamplan.Session:
		ws.SizeMs, ws.Spec = lens[0], window.Spec{Kind: window.Session, Gap: lens[0]}
	}
	if err := ws.Spec.Validate(); err != nil {
		return sql.Errorf(sql.CodeInvalidParameter, "%v", err).WithPos(pos)
	}
	as.window = ws
	return nil
}

// WindowSpec is the event-time window of a GROUP BY: the stream
// graph's, which the aggregating specs carry.
type WindowSpec = streamplan.Window

// AggCall is one aggregate of the query (the stream graph's).
type AggCall = streamplan.AggCall

// OrderKey sorts bounded query results by an output column.
type OrderKey struct {
	Idx        int
	Desc       bool
	NullsFirst bool // PostgreSQL's default: NULLs sort as if larger than any value (last ascending, first descending)
}

// Compare orders two values of the key's column as its ORDER BY item
// says: direction, then where NULLs go.
func (k OrderKey) Compare(a, b any) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil || b == nil:
		if (a == nil) == k.NullsFirst {
			return -1
		}
		return 1
	}
	c := CompareValues(a, b)
	if k.Desc {
		return -c
	}
	return c
}

// orderItem reads an ORDER BY item: its expression (unwrapped from the
// NULLS FIRST/LAST marker sql rewrites it into) and its direction.
func orderItem(item *ast.ByItem) (ast.ExprNode, OrderKey) {
	k := OrderKey{Desc: item.Desc, NullsFirst: item.Desc}
	e := item.Expr
	if f, ok := e.(*ast.FuncCallExpr); ok && len(f.Args) == 1 {
		switch f.FnName.L {
		case sql.NullsFirstFunc:
			e, k.NullsFirst = f.Args[0], true
		case sql.NullsLastFunc:
			e, k.NullsFirst = f.Args[0], false
		default:
			return e, k
		}
		// A bare integer is a position in the select list, as the parser
		// reads ORDER BY 2 when nothing wraps it.
		if n, err := intArg(f, 0); err == nil {
			e = &ast.PositionExpr{N: int(n)}
		}
	}
	return e, k
}

// Plan is a physical plan for a stream or a bounded query.
type Plan struct {
	Input  *catalog.Relation
	Filter exec.Expr // over the input; nil: all rows

	Aggregate bool
	Distinct  bool // SELECT DISTINCT (bounded queries)
	// NeedsSeq: the input batch must carry SeqColumn after its columns.
	NeedsSeq bool
	Keys     []exec.Expr // over the input
	KeyNames []string
	Window   *WindowSpec
	Aggs     []AggCall
	Having   exec.Expr // over the post-aggregation row

	// PartitionKey is the index in Keys of the input's partition key (local
	// strategy), or -1.
	PartitionKey int

	Project []exec.Expr // over the post-aggregation row (or the input)
	Output  types.Schema

	OrderBy []OrderKey
	Limit   int64 // -1: none
	// Hidden is how many trailing Project entries exist only to sort by;
	// they are cut from result rows after sorting.
	Hidden int

	Strategy streamplan.Strategy
	Rule     string // the rule that chose Strategy, for EXPLAIN
	Reason   string
	// RepartitionBy is the input column a repartition hop re-keys by
	// (Strategy repartition); the aggregation then reads the hop's topic,
	// partitioned by it.
	RepartitionBy string
	// CombineEligible: strategy auto, and a combine hop could serve the
	// query as well as the repartition hop chosen so far.
	CombineEligible bool
	// Estimate is what the cost rule measured, for EXPLAIN (nil: none).
	Estimate *Estimate

	// From is what a bounded query reads when it is more than one source
	// or stream (joins, catalog tables, subqueries in FROM, no FROM); nil:
	// Input's topic. Input's Schema is then From's.
	From *Rel
	// Union: the plan is the UNION [ALL] of these (each a whole query);
	// OrderBy and Limit then apply to the combined rows.
	Union    []*Plan
	UnionAll bool
	Offset   int64
	// Expand: each filtered input row is repeated once per element of the
	// longest of these arrays (set-returning functions in the select
	// list), with the element's position appended as one more column.
	Expand []exec.Expr
}

// PostAggSchema is the row the aggregation emits: keys, window bounds, aggregates.
func (p *Plan) PostAggSchema() types.Schema {
	var s types.Schema
	for i, k := range p.Keys {
		s = append(s, types.Field{Name: p.KeyNames[i], Type: k.Type()})
	}
	if p.Window != nil {
		s = append(s, types.Field{Name: "window_start", Type: types.Timestamp}, types.Field{Name: "window_end", Type: types.Timestamp})
	}
	for _, a := range p.Aggs {
		s = append(s, types.Field{Name: strings.ToLower(a.Spec.Name), Type: a.Type})
	}
	return s
}

// Resolver finds relations by name.
type Resolver interface {
	Relation(name string) (*catalog.Relation, bool)
}

// BuildQuery plans a bounded SELECT. With an Env as cat it can also read
// the system catalog, join, and run subqueries.
func BuildQuery(cat Resolver, stmt *ast.SelectStmt, src string) (*Plan, error) {
	return BuildNode(cat, stmt, src)
}

// BuildNode plans a bounded SELECT or UNION.
func BuildNode(cat Resolver, n ast.ResultSetNode, src string) (*Plan, error) {
	return buildNode(cat, n, src, &qctx{env: envOf(cat)})
}

func buildNode(cat Resolver, n ast.ResultSetNode, src string, q *qctx) (*Plan, error) {
	if q == nil {
		q = &qctx{env: envOf(cat)}
	}
	switch x := n.(type) {
	case *ast.SelectStmt:
		return buildBounded(cat, x, src, q)
	case *ast.SetOprStmt:
		return buildSetOpr(cat, x, src, q)
	}
	return nil, sql.Errorf(sql.CodeNotSupported, "query form %T is not supported", n)
}

func buildBounded(cat Resolver, stmt *ast.SelectStmt, src string, q *qctx) (*Plan, error) {
	p, err := build(cat, stmt, src, q)
	if err != nil {
		return nil, err
	}
	p.Strategy = streamplan.StrategyBounded
	p.Rule = "BoundedRead"
	p.Reason = "a bounded read of the topic from its start to its end now"
	if p.From != nil {
		p.Reason = "a bounded query: each relation of its FROM read whole (topics to their end now, catalog tables as they are)"
	}
	return p, nil
}

// BuildStream plans a continuous query.
func BuildStream(cat Resolver, stmt *ast.SelectStmt, src string, strategy streamplan.Strategy) (*Plan, error) {
	p, err := build(cat, stmt, src, nil)
	if err != nil {
		return nil, err
	}
	if stmt.Distinct {
		return nil, sql.Errorf(sql.CodeNotSupported, "SELECT DISTINCT is not supported in a continuous query").
			WithHint("GROUP BY the columns instead")
	}
	if stmt.OrderBy != nil || stmt.Limit != nil {
		return nil, sql.Errorf(sql.CodeNotSupported, "ORDER BY and LIMIT are not supported in a continuous query").
			WithHint("order or limit when reading the stream: SELECT ... FROM stream ORDER BY ...")
	}
	// Output rows are JSON objects: every field needs its own name.
	seen := map[string]bool{}
	for _, f := range p.Output {
		n := strings.ToLower(f.Name)
		if seen[n] || f.Name == "?column?" {
			return nil, sql.Errorf(sql.CodeDuplicateObject, "output column %q of a stream must have a unique name", f.Name).WithHint("name it with AS")
		}
		seen[n] = true
	}
	if err := chooseStrategy(p, strategy, src); err != nil {
		return nil, err
	}
	return p, nil
}

func build(cat Resolver, stmt *ast.SelectStmt, src string, q *qctx) (*Plan, error) {
	if err := unsupportedClauses(stmt); err != nil {
		return nil, err
	}
	rel, from, tabs, err := fromClause(q, cat, stmt, src)
	if err != nil {
		return nil, err
	}
	p := &Plan{Input: rel, From: from, PartitionKey: -1, Limit: -1}
	evt := -1
	if rel.Watermark != nil {
		evt = rel.Schema.Index(rel.Watermark.Column)
	}
	in := &scope{src: src, input: rel.Schema, eventTime: evt, tabs: tabs, q: q}

	if stmt.Where != nil {
		ws := &scope{src: src, input: rel.Schema, noAggs: "WHERE", eventTime: evt, tabs: tabs, q: q}
		f, err := ws.compile(stmt.Where)
		if err != nil {
			return nil, err
		}
		if f.Type() != types.Bool && f.Type() != types.Unknown {
			return nil, sql.Errorf(sql.CodeDatatypeMismatch, "argument of WHERE must be type boolean, not type %s", lower(f.Type()))
		}
		p.Filter = f
	}

	hasAgg := stmt.GroupBy != nil || stmt.Having != nil || selectHasAgg(stmt)
	out := in
	if hasAgg {
		p.Aggregate = true
		as := &aggScope{}
		if stmt.GroupBy != nil {
			for _, item := range stmt.GroupBy.Items {
				e, err := groupItem(stmt, item.Expr)
				if err != nil {
					return nil, err
				}
				if err := addGroupItem(in, as, e); err != nil {
					return nil, err
				}
			}
		}
		out = &scope{src: src, input: rel.Schema, agg: as, eventTime: evt, tabs: tabs, q: q}
		if err := project(p, out, stmt); err != nil {
			return nil, err
		}
		if stmt.Having != nil {
			h, err := out.compile(stmt.Having.Expr)
			if err != nil {
				return nil, err
			}
			p.Having = h
		}
		p.Keys, p.KeyNames, p.Window, p.Aggs = as.keys, as.keyNames, as.window, as.calls
		p.NeedsSeq = as.needsSeq
	} else if err := project(p, out, stmt); err != nil {
		return nil, err
	}

	if stmt.OrderBy != nil {
		for _, item := range stmt.OrderBy.Items {
			e, k := orderItem(item)
			idx, err := orderIndex(p, out, stmt, e)
			if err != nil {
				return nil, err
			}
			k.Idx = idx
			p.OrderBy = append(p.OrderBy, k)
		}
	}
	p.Distinct = stmt.Distinct
	if p.Distinct && p.Hidden > 0 {
		return nil, sql.Errorf("42P10", "for SELECT DISTINCT, ORDER BY expressions must appear in select list")
	}
	if err := limitClause(p, stmt.Limit); err != nil {
		return nil, err
	}
	if q != nil {
		p.Expand = q.expand
	}
	return p, nil
}

// unsupportedClauses refuses, by name, what the parser reads but the
// planner would otherwise ignore.
func unsupportedClauses(stmt *ast.SelectStmt) error {
	var what string
	switch {
	case stmt.Kind != ast.SelectStmtKindSelect:
		what = "TABLE and VALUES as statements"
	case stmt.With != nil:
		what = "WITH (common table expressions)"
	case stmt.LockInfo != nil && stmt.LockInfo.LockType != ast.SelectLockNone:
		what = "SELECT ... FOR UPDATE/SHARE"
	case stmt.SelectIntoOpt != nil:
		what = "SELECT ... INTO"
	case len(stmt.WindowSpecs) > 0:
		what = "WINDOW clauses"
	case stmt.GroupBy != nil && stmt.GroupBy.Rollup:
		what = "GROUP BY ... WITH ROLLUP"
	default:
		return nil
	}
	return sql.Errorf(sql.CodeNotSupported, "%s is not supported", what)
}

// limitClause reads LIMIT n [OFFSET m].
func limitClause(p *Plan, l *ast.Limit) error {
	if l == nil {
		return nil
	}
	num := func(e ast.ExprNode, what string) (int64, error) {
		v, ok := e.(*driver.ValueExpr)
		if !ok {
			return 0, sql.Errorf(sql.CodeSyntax, "%s needs a number", what)
		}
		switch n := v.GetValue().(type) {
		case int64:
			return n, nil
		case uint64:
			return int64(n), nil
		}
		return 0, sql.Errorf(sql.CodeSyntax, "%s needs a number", what)
	}
	var err error
	if l.Count != nil {
		if p.Limit, err = num(l.Count, "LIMIT"); err != nil {
			return err
		}
	}
	if l.Offset != nil {
		if p.Offset, err = num(l.Offset, "OFFSET"); err != nil {
			return err
		}
	}
	return nil
}

// buildSetOpr plans a UNION [ALL] of SELECTs; ORDER BY and LIMIT after the
// last one apply to the whole.
func buildSetOpr(cat Resolver, x *ast.SetOprStmt, src string, q *qctx) (*Plan, error) {
	if x.With != nil {
		return nil, sql.Errorf(sql.CodeNotSupported, "WITH is not supported")
	}
	p := &Plan{PartitionKey: -1, Limit: -1, UnionAll: true, Strategy: streamplan.StrategyBounded, Rule: "BoundedRead",
		Reason: "the rows of each query of the UNION, in turn"}
	for i, n := range x.SelectList.Selects {
		var op *ast.SetOprType
		var sub *Plan
		var err error
		switch b := n.(type) {
		case *ast.SelectStmt:
			op = b.AfterSetOperator
			sub, err = buildBounded(cat, b, src, &qctx{env: q.env, outer: q.outer})
		case *ast.SetOprSelectList:
			op = b.AfterSetOperator
			sub, err = buildSetOpr(cat, &ast.SetOprStmt{SelectList: b}, src, &qctx{env: q.env, outer: q.outer})
		default:
			return nil, sql.Errorf(sql.CodeNotSupported, "set operation over %T is not supported", n)
		}
		if err != nil {
			return nil, err
		}
		if i > 0 && op != nil {
			switch *op {
			case ast.Union:
				p.UnionAll = false
			case ast.UnionAll:
			default:
				return nil, sql.Errorf(sql.CodeNotSupported, "%s is not supported; UNION and UNION ALL are", op.String())
			}
		}
		if i > 0 && len(sub.Output) != len(p.Union[0].Output) {
			return nil, sql.Errorf(sql.CodeSyntax, "each UNION query must have the same number of columns")
		}
		p.Union = append(p.Union, sub)
	}
	p.Output = append(types.Schema{}, p.Union[0].Output...)
	for _, b := range p.Union[1:] {
		for i, f := range b.Output {
			if p.Output[i].Type == types.Unknown || (p.Output[i].Type == types.Int && f.Type == types.Double) {
				p.Output[i].Type = f.Type
			}
		}
	}
	p.Input = &catalog.Relation{Name: "?", Schema: p.Output}
	if x.OrderBy != nil {
		for _, item := range x.OrderBy.Items {
			idx := -1
			e, k := orderItem(item)
			switch e := e.(type) {
			case *ast.PositionExpr:
				idx = e.N - 1
			case *ast.ColumnNameExpr:
				idx = p.Output.Index(e.Name.Name.O)
			}
			if idx < 0 || idx >= len(p.Output) {
				return nil, sql.Errorf(sql.CodeNotSupported, "ORDER BY of a UNION must name an output column or position")
			}
			k.Idx = idx
			p.OrderBy = append(p.OrderBy, k)
		}
	}
	if err := limitClause(p, x.Limit); err != nil {
		return nil, err
	}
	return p, nil
}

func selectHasAgg(stmt *ast.SelectStmt) bool {
	found := false
	for _, f := range stmt.Fields.Fields {
		if f.Expr != nil {
			f.Expr.Accept(&aggFinder{found: &found})
		}
	}
	return found
}

type aggFinder struct{ found *bool }

func (a *aggFinder) Enter(n ast.Node) (ast.Node, bool) {
	switch x := n.(type) {
	case *ast.SubqueryExpr: // a subquery's aggregates are its own
		return n, true
	case *ast.AggregateFuncExpr:
		*a.found = true
		return n, true
	case *ast.FuncCallExpr:
		if agg.IsAggregate(strings.TrimPrefix(x.FnName.L, "__")) {
			*a.found = true
			return n, true
		}
	}
	return n, false
}
func (a *aggFinder) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// addGroupItem adds one GROUP BY item: a window function or a key.
func addGroupItem(in *scope, as *aggScope, e ast.ExprNode) error {
	if call, ok := e.(*ast.FuncCallExpr); ok {
		name := strings.ToUpper(call.FnName.O)
		switch name {
		case "TUMBLE", "HOP", strings.ToUpper(sql.SessionFunc):
			return in.groupWindow(as, call, strings.TrimPrefix(name, "__"))
		}
	}
	k, err := in.compile(e)
	if err != nil {
		return err
	}
	name := "?column?"
	if c, ok := e.(*ast.ColumnNameExpr); ok {
		name = c.Name.Name.O
		if i := in.input.Index(name); i >= 0 {
			name = in.input[i].Name
		}
	}
	as.keys = append(as.keys, k)
	as.keyText = append(as.keyText, restore(e))
	as.keyNames = append(as.keyNames, name)
	return nil
}

// project compiles the select list.
func project(p *Plan, s *scope, stmt *ast.SelectStmt) error {
	for _, f := range stmt.Fields.Fields {
		if f.WildCard != nil {
			if s.agg != nil {
				return sql.Errorf(sql.CodeGrouping, "SELECT * cannot be used with GROUP BY")
			}
			for i, c := range s.input {
				p.Project = append(p.Project, &exec.ColRef{Idx: i, Name: c.Name, T: c.Type})
				p.Output = append(p.Output, c)
			}
			continue
		}
		e, err := s.compile(f.Expr)
		if err != nil {
			return err
		}
		t := e.Type()
		if t == types.Unknown {
			e, t = &exec.Literal{T: types.Text}, types.Text
		}
		if t == types.Interval {
			return sql.Errorf(sql.CodeNotSupported, "INTERVAL values cannot be output; subtract to a number of milliseconds instead")
		}
		p.Project = append(p.Project, e)
		var oid uint32
		if s.agg == nil {
			oid = pgOID(e, s.input)
		} else {
			oid = s.agg.pgOID(e)
		}
		p.Output = append(p.Output, types.Field{Name: fieldName(f), Type: t, OID: oid})
	}
	return nil
}

// fieldName is the output name PostgreSQL would give a select item.
func fieldName(f *ast.SelectField) string {
	if f.AsName.O != "" {
		return f.AsName.O
	}
	switch x := f.Expr.(type) {
	case *ast.ColumnNameExpr:
		return x.Name.Name.O
	case *ast.AggregateFuncExpr:
		return strings.ToLower(x.F)
	case *ast.FuncCallExpr:
		if x.FnName.L == ast.TimestampLiteral || x.FnName.L == ast.DateLiteral {
			return "timestamp"
		}
		switch x.FnName.L {
		case sql.ArrayFunc, sql.ArraySubFunc:
			return "array"
		case sql.AnyFunc, sql.AllFunc, sql.SubscriptFunc, sql.CIFunc:
			return "?column?"
		}
		if strings.HasPrefix(x.FnName.L, "__reg") || x.FnName.L == "__oid" || x.FnName.L == sql.ArrayCastFunc {
			// x::regclass is named after x, as any cast
			if len(x.Args) == 1 {
				if n := fieldName(&ast.SelectField{Expr: x.Args[0]}); n != "?column?" {
					return n
				}
			}
			return strings.TrimPrefix(x.FnName.L, "__")
		}
		return strings.TrimPrefix(strings.ToLower(x.FnName.O), "__")
	case *ast.FuncCastExpr:
		if e, ok := x.Expr.(*ast.ColumnNameExpr); ok {
			return e.Name.Name.O
		}
	case *ast.ParenthesesExpr:
		return fieldName(&ast.SelectField{Expr: x.Expr})
	case *ast.CaseExpr:
		return "case"
	case *ast.SubqueryExpr:
		if sel, ok := x.Query.(*ast.SelectStmt); ok && sel.Fields != nil && len(sel.Fields.Fields) == 1 {
			return fieldName(sel.Fields.Fields[0])
		}
	case *ast.ExistsSubqueryExpr:
		return "exists"
	}
	return "?column?"
}

// groupItem resolves a positional GROUP BY item (GROUP BY 1: the first
// select-list expression), as PostgreSQL does; other items are themselves.
func groupItem(stmt *ast.SelectStmt, e ast.ExprNode) (ast.ExprNode, error) {
	x, ok := e.(*ast.PositionExpr)
	if !ok {
		return e, nil
	}
	if x.P != nil || stmt.Fields == nil || x.N < 1 || x.N > len(stmt.Fields.Fields) {
		return nil, sql.Errorf("42P10", "GROUP BY position %d is not in select list", x.N)
	}
	f := stmt.Fields.Fields[x.N-1]
	if f.Expr == nil {
		return nil, sql.Errorf("42P10", "GROUP BY position %d is a *: name the columns", x.N)
	}
	if _, isAgg := f.Expr.(*ast.AggregateFuncExpr); isAgg {
		return nil, sql.Errorf(sql.CodeGrouping, "aggregate functions are not allowed in GROUP BY").
			WithHint("GROUP BY %d names %s, an aggregate", x.N, restore(f.Expr))
	}
	return f.Expr, nil
}

func orderIndex(p *Plan, s *scope, stmt *ast.SelectStmt, e ast.ExprNode) (int, error) {
	switch x := e.(type) {
	case *ast.PositionExpr:
		if x.N < 1 || x.N > len(p.Output) {
			return 0, sql.Errorf("42P10", "ORDER BY position %d is not in select list", x.N)
		}
		return x.N - 1, nil
	case *ast.ColumnNameExpr:
		if i := p.Output.Index(x.Name.Name.O); i >= 0 {
			return i, nil
		}
	}
	txt := restore(e)
	for i, f := range stmt.Fields.Fields {
		if f.Expr != nil && restore(f.Expr) == txt {
			return i, nil
		}
	}
	// Not in the select list: sort by a hidden extra column.
	x, err := s.compile(e)
	if err != nil {
		return 0, err
	}
	p.Project = append(p.Project, x)
	p.Hidden++
	return len(p.Project) - 1, nil
}

// chooseStrategy applies the placement rules in order; the first that fires
// decides.
//
// Rule LocalPartitionKey: GROUP BY contains the input's partition key, so
// every group already lives on one partition and nothing moves.
//
//	SELECT k, COUNT(*) FROM src GROUP BY k, TUMBLE(ts, ...)   -- src keyed by k
//	=> local aggregation on each partition of src
func chooseStrategy(p *Plan, requested streamplan.Strategy, src string) error {
	if !p.Aggregate {
		p.Strategy, p.Rule = streamplan.StrategyStateless, "Stateless"
		p.Reason = "no aggregation: each record is filtered and projected where it is read"
		return nil
	}
	if p.Window == nil && len(p.Keys) == 0 {
		return sql.Errorf(sql.CodeNotSupported, "a continuous aggregation needs a GROUP BY: a window such as TUMBLE(ts, INTERVAL '1' MINUTE), keys, or both")
	}
	pk := p.Input.PartitionKey
	if pk != "" {
		for i, k := range p.Keys {
			if c, ok := k.(*exec.ColRef); ok && strings.EqualFold(c.Name, pk) {
				p.PartitionKey = i
			}
		}
	}
	if len(p.Keys) == 0 && requested != streamplan.StrategyRepartition {
		return chooseKeylessCombine(p, requested)
	}
	switch requested {
	case streamplan.StrategyAuto:
		if p.PartitionKey >= 0 && p.Input.Misplaced != "" {
			if rekeyMisplaced(p, p.Input.Misplaced) {
				return nil
			}
		}
	case streamplan.StrategyLocal:
	case streamplan.StrategyRepartition:
		return chooseRepartition(p, requested, pk)
	case streamplan.StrategyCombine:
		return chooseCombine(p)
	default:
		return UnknownStrategy(requested.String())
	}
	if p.PartitionKey < 0 && requested != streamplan.StrategyLocal {
		if err := chooseRepartition(p, requested, pk); err != nil {
			return err
		}
		// Both hops can serve this query: the cost rule (ChooseByCost)
		// picks one once the caller has sampled the source.
		// A keyed HOP stays with repartition under auto: combine serves
		// it when asked (strategy = 'combine'), but the cost rule's
		// estimate counts windows, not the slices HOP would ship.
		p.CombineEligible = combinable(p) == nil && p.Window.Kind() == streamplan.Tumble
		return nil
	}
	if p.PartitionKey < 0 {
		why := fmt.Sprintf("%s has no partition_key", p.Input.Name)
		if p.Input.Stream != nil {
			// A stream's partition key is its output key (message_key, or an aggregation's single group key).
			why = fmt.Sprintf("the output of stream %s is not keyed (set message_key on it)", p.Input.Name)
		}
		if pk != "" {
			why = fmt.Sprintf("%s is partitioned by %s", p.Input.Name, pk)
		}
		return sql.Errorf(sql.CodeNotSupported, "GROUP BY must include the partition key of %s: %s, so groups would span partitions", p.Input.Name, why).
			WithHint("add %s to GROUP BY; repartition and combine hops are not supported yet", orWord(pk, "a partition_key"))
	}
	p.Strategy, p.Rule = streamplan.StrategyLocal, "LocalPartitionKey"
	p.Reason = fmt.Sprintf("GROUP BY contains %s, the partition key of %s: every group lives on one partition", pk, p.Input.Name)
	return nil
}

// UnknownStrategy is the error of a strategy option naming no strategy.
func UnknownStrategy(value string) error {
	return sql.Errorf(sql.CodeInvalidParameter, "unknown strategy %q", value).
		WithHint("use %s", streamplan.PlainList(strategyNames(streamplan.Requestable)))
}

func strategyNames(ss []streamplan.Strategy) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.String()
	}
	return out
}

func orWord(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// NewAggregator makes the hash aggregation of a plan: what a stream's
// tasks and a bounded query run.
func NewAggregator(p *Plan, latenessMs int64) (*exec.Aggregator, error) {
	cfg := exec.AggConfig{Filter: p.Filter, Keys: p.Keys, PK: p.PartitionKey, TimeIdx: -1, Lateness: latenessMs,
		Specs: make([]agg.Spec, len(p.Aggs)), Args: make([][]exec.Expr, len(p.Aggs))}
	for i, a := range p.Aggs {
		cfg.Specs[i] = a.Spec
		cfg.Args[i] = a.Args
	}
	if p.Window != nil {
		spec := p.Window.Spec
		cfg.TimeIdx, cfg.Window = p.Window.TimeIdx, &spec
	}
	return exec.NewAggregator(cfg)
}
