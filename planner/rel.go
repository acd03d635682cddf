package planner

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/pgcat"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/types"
)

// Env is what a bounded query is planned against beyond the user's
// relations: the system catalog (pg_catalog, information_schema and their
// functions) and a way to run a subquery's plan while the query runs.
type Env interface {
	Resolver
	Catalog() pgcat.Env
	Run(p *Plan) ([][]any, error)
}

// Clock is what an Env implements to give now() its value (the statement's
// start); without it now() is the wall clock when planned.
type Clock interface{ Now() time.Time }

// now is the statement's now().
func (q *qctx) now() time.Time {
	if c, ok := q.env.(Clock); ok {
		return c.Now()
	}
	return time.Now()
}

// qctx is one query being planned.
type qctx struct {
	env   Env
	outer *scope // the enclosing query's scope, for correlated subqueries
	corr  []corrRef
	// wholeInput: the query's input is evaluated as one batch (the
	// relational path), so a window function sees every row.
	wholeInput bool
	// expand are the arrays the set-returning functions of the select
	// list run over (Plan.Expand), by their SQL text.
	expand     []exec.Expr
	expandText []string
}

// corrRef is an outer column a correlated subquery reads: Outer is
// evaluated over the enclosing query's batch and stored in Cell.
type corrRef struct {
	key   string
	outer exec.Expr
	cell  *any
}

// tabRef names the relation an input column comes from.
type tabRef struct {
	alias  string // the alias, or the table's own name
	schema string // the table's schema when it has no alias
}

// RelKind is what a Rel reads.
type RelKind int

const (
	RelTopic   RelKind = iota // a source's or stream's topic
	RelVirtual                // a pg_catalog or information_schema table
	RelJoin
	RelDerived // a subquery in FROM
	RelOneRow  // no FROM: one row of no columns
	RelFunc    // a set-returning function in FROM: unnest, generate_series
)

// Rel is a relation in the FROM clause of a bounded query.
type Rel struct {
	Kind     RelKind
	Relation *catalog.Relation // RelTopic
	Virtual  *pgcat.Table      // RelVirtual
	Sub      *Plan             // RelDerived
	// RelFunc: Func (unnest or generate_series) over Args, evaluated over
	// one row (they may read the enclosing query's columns).
	Func string
	Args []exec.Expr
	// RelJoin: Left and Right joined on On (over Left's columns then
	// Right's); Type is inner, left or cross (a right join is planned as a
	// left join with its sides swapped, Swap then restores column order).
	Left, Right *Rel
	JoinType    string
	On          exec.Expr
	Swap        bool
	Schema      types.Schema
	tabs        []tabRef
}

// envOf is cat as an Env, nil when it is only a Resolver (continuous
// queries plan against relations only).
func envOf(cat Resolver) Env {
	if e, ok := cat.(Env); ok {
		return e
	}
	return nil
}

// fromClause plans the FROM clause. rel is nil for the plain read of one
// source or stream (the path continuous queries share); otherwise it is
// the tree of relations to read.
func fromClause(q *qctx, cat Resolver, stmt *ast.SelectStmt, src string) (input *catalog.Relation, rel *Rel, tabs []tabRef, err error) {
	if stmt.From == nil || stmt.From.TableRefs == nil {
		if q == nil || q.env == nil {
			return nil, nil, nil, sql.Errorf(sql.CodeNotSupported, "SELECT needs a FROM clause naming a source or stream")
		}
		r := &Rel{Kind: RelOneRow}
		return &catalog.Relation{Name: "?"}, r, nil, nil
	}
	join := stmt.From.TableRefs
	windowed := q != nil && q.env != nil && hasWindowFunc(stmt)
	if windowed {
		q.wholeInput = true
	}
	if join.Right == nil && !windowed {
		if ts, ok := join.Left.(*ast.TableSource); ok {
			if tn, ok := ts.Source.(*ast.TableName); ok && (tn.Schema.L == "" || tn.Schema.L == "public") {
				if r, ok := cat.Relation(tn.Name.L); ok {
					alias := ts.AsName.L
					if alias == "" {
						alias = tn.Name.L
					}
					t := make([]tabRef, len(r.Schema))
					for i := range t {
						t[i] = tabRef{alias: alias, schema: "public"}
					}
					if q == nil || q.env == nil {
						t = nil
					}
					return r, nil, t, nil
				}
			}
		}
	}
	if q == nil || q.env == nil {
		if join.Right != nil {
			return nil, nil, nil, sql.Errorf(sql.CodeNotSupported, "joins are not supported in a continuous query")
		}
		if ts, ok := join.Left.(*ast.TableSource); ok {
			if tn, ok := ts.Source.(*ast.TableName); ok {
				if _, sys := pgcat.Lookup(tn.Schema.L, tn.Name.L); sys {
					return nil, nil, nil, sql.Errorf(sql.CodeNotSupported, "a continuous query cannot read the system catalog (%s)", tn.Name.O)
				}
				return nil, nil, nil, sql.Errorf(sql.CodeUndefinedTable, "relation %q does not exist", tn.Name.O).
					WithPos(sql.FindPos(src, tn.Name.O)).WithHint("SHOW SOURCES and SHOW STREAMS list what exists")
			}
		}
		return nil, nil, nil, sql.Errorf(sql.CodeNotSupported, "FROM must name one source or stream in a continuous query")
	}
	r, err := planRel(q, cat, join, src)
	if err != nil {
		return nil, nil, nil, err
	}
	return &catalog.Relation{Name: "?", Schema: r.Schema}, r, r.tabs, nil
}

func planRel(q *qctx, cat Resolver, n ast.ResultSetNode, src string) (*Rel, error) {
	switch x := n.(type) {
	case *ast.Join:
		if x.Right == nil {
			return planRel(q, cat, x.Left, src)
		}
		return planJoin(q, cat, x, src)
	case *ast.TableSource:
		switch t := x.Source.(type) {
		case *ast.TableName:
			r, err := tableRel(cat, t, src)
			if err != nil {
				return nil, err
			}
			alias := x.AsName.L
			schema := ""
			if alias == "" {
				alias = t.Name.L
				schema = r.tabs[0].schema
			}
			for i := range r.tabs {
				r.tabs[i] = tabRef{alias: alias, schema: schema}
			}
			return r, nil
		case *ast.SelectStmt, *ast.SetOprStmt:
			if sel, ok := t.(*ast.SelectStmt); ok {
				if r, ok, err := tableFuncRel(q, sel, x.AsName.L, src); ok || err != nil {
					return r, err
				}
			}
			// A derived table may read the enclosing query's columns (a
			// correlated subquery's FROM): its outer references are this
			// query's, set before each run.
			dq := &qctx{env: q.env, outer: q.outer}
			sub, err := buildNode(q.env, t, src, dq)
			if err != nil {
				return nil, err
			}
			q.corr = append(q.corr, dq.corr...)
			r := &Rel{Kind: RelDerived, Sub: sub, Schema: sub.Output}
			r.tabs = make([]tabRef, len(sub.Output))
			for i := range r.tabs {
				r.tabs[i] = tabRef{alias: x.AsName.L}
			}
			return r, nil
		}
	}
	return nil, sql.Errorf(sql.CodeNotSupported, "FROM item %T is not supported", n)
}

// tableRel resolves a table name: a source or stream (schema public), or
// a virtual catalog table.
func tableRel(cat Resolver, t *ast.TableName, src string) (*Rel, error) {
	schema := t.Schema.L
	if schema == "" || schema == "public" {
		if r, ok := cat.Relation(t.Name.L); ok {
			return &Rel{Kind: RelTopic, Relation: r, Schema: r.Schema, tabs: make([]tabRef, len(r.Schema))}, nil
		}
	}
	if vt, ok := pgcat.Lookup(schema, t.Name.L); ok && schema != "public" {
		s := vt.Fields()
		tabs := make([]tabRef, len(s))
		for i := range tabs {
			tabs[i].schema = vt.Schema
		}
		return &Rel{Kind: RelVirtual, Virtual: vt, Schema: s, tabs: tabs}, nil
	}
	name := t.Name.O
	if schema != "" {
		name = t.Schema.O + "." + name
	}
	hint := "SHOW SOURCES and SHOW STREAMS list what exists"
	if pgcat.IsSystemSchema(schema) {
		hint = "TurbineSQL serves the pg_catalog and information_schema tables that PostgreSQL clients read; this one is not among them"
	}
	return nil, sql.Errorf(sql.CodeUndefinedTable, "relation %q does not exist", name).
		WithPos(sql.FindPos(src, t.Name.O)).WithHint("%s", hint)
}

func planJoin(q *qctx, cat Resolver, j *ast.Join, src string) (*Rel, error) {
	if j.NaturalJoin || j.StraightJoin {
		return nil, sql.Errorf(sql.CodeNotSupported, "NATURAL JOIN is not supported; join with ON")
	}
	left, err := planRel(q, cat, j.Left, src)
	if err != nil {
		return nil, err
	}
	right, err := planRel(q, cat, j.Right, src)
	if err != nil {
		return nil, err
	}
	r := &Rel{Kind: RelJoin, JoinType: "inner"}
	switch j.Tp {
	case ast.LeftJoin:
		r.JoinType = "left"
	case ast.RightJoin:
		r.JoinType, r.Swap = "left", true
	}
	if j.On == nil && len(j.Using) == 0 && r.JoinType == "inner" {
		r.JoinType = "cross"
	}
	if r.Swap {
		left, right = right, left
	}
	r.Left, r.Right = left, right
	r.Schema = append(append(types.Schema{}, left.Schema...), right.Schema...)
	r.tabs = append(append([]tabRef{}, left.tabs...), right.tabs...)
	s := &scope{src: src, input: r.Schema, tabs: r.tabs, eventTime: -1, q: q, noAggs: "JOIN conditions"}
	var on exec.Expr
	if j.On != nil {
		if on, err = s.compile(j.On.Expr); err != nil {
			return nil, err
		}
	}
	for _, c := range j.Using {
		li, ri := left.Schema.Index(c.Name.O), right.Schema.Index(c.Name.O)
		if li < 0 || ri < 0 {
			return nil, sql.Errorf(sql.CodeUndefinedColumn, "column %q specified in USING clause does not exist in both sides", c.Name.O)
		}
		eq, err := s.compare("=", &exec.ColRef{Idx: li, Name: c.Name.O, T: left.Schema[li].Type},
			&exec.ColRef{Idx: len(left.Schema) + ri, Name: c.Name.O, T: right.Schema[ri].Type})
		if err != nil {
			return nil, err
		}
		if on == nil {
			on = eq
		} else {
			on = &exec.Logic{And: true, L: on, R: eq}
		}
		// PostgreSQL merges a USING column: the right copy is no longer
		// reachable by its bare name.
		r.tabs[len(left.Schema)+ri].alias = "\x00using"
	}
	if on != nil {
		if on, err = s.boolArg("argument of JOIN/ON", on); err != nil {
			return nil, err
		}
	}
	r.On = on
	return r, nil
}

// find resolves a column name (possibly qualified) in the input; -1 when
// absent, an error when ambiguous.
func (s *scope) find(n *ast.ColumnName) (int, error) {
	if s.tabs == nil {
		if n.Table.L != "" {
			// One relation: a qualifier must name it; that is checked by
			// the caller knowing the relation's name, so accept it here.
		}
		return s.input.Index(n.Name.O), nil
	}
	found := -1
	for i, f := range s.input {
		if !strings.EqualFold(f.Name, n.Name.O) {
			continue
		}
		t := s.tabs[i]
		if n.Table.L != "" {
			if t.alias != n.Table.L {
				continue
			}
			if n.Schema.L != "" && t.schema != n.Schema.L {
				continue
			}
		} else if t.alias == "\x00using" {
			continue
		}
		if found >= 0 {
			return -1, s.errf("42702", n.Name.O, "column reference %q is ambiguous", qualifiedName(n))
		}
		found = i
	}
	return found, nil
}

func qualifiedName(n *ast.ColumnName) string {
	parts := []string{}
	if n.Schema.O != "" {
		parts = append(parts, n.Schema.O)
	}
	if n.Table.O != "" {
		parts = append(parts, n.Table.O)
	}
	return strings.Join(append(parts, n.Name.O), ".")
}

// outerColumn resolves a column of an enclosing query inside a correlated
// subquery: the enclosing scope compiles it over its own batch, and this
// query reads it through a cell set before each run.
func (s *scope) outerColumn(x *ast.ColumnNameExpr) (exec.Expr, bool, error) {
	if s.q == nil || s.q.outer == nil {
		return nil, false, nil
	}
	e, err := s.q.outer.compile(x)
	if err != nil {
		return nil, false, nil
	}
	key := qualifiedName(x.Name)
	for _, c := range s.q.corr {
		if c.key == key {
			return &exec.OuterRef{Cell: c.cell, Name: key, T: e.Type()}, true, nil
		}
	}
	cell := new(any)
	s.q.corr = append(s.q.corr, corrRef{key: key, outer: e, cell: cell})
	return &exec.OuterRef{Cell: cell, Name: key, T: e.Type()}, true, nil
}

// subplan plans a subquery of this scope's query.
func (s *scope) subplan(n ast.ResultSetNode) (*Plan, *qctx, error) {
	if s.q == nil || s.q.env == nil {
		return nil, nil, s.errf(sql.CodeNotSupported, "", "subqueries are not supported in a continuous query")
	}
	q := &qctx{env: s.q.env, outer: s}
	p, err := buildNode(s.q.env, n, s.src, q)
	return p, q, err
}

// subquery wraps a planned subquery as a value. A subquery that uses
// something not supported fails only if it runs: clients send catalog
// queries whose subqueries read tables that are empty here (psql's
// publications), and those must still answer.
func (s *scope) subquery(n ast.ResultSetNode, t types.Type, probe exec.Expr,
	reduce func(rows [][]any, probe any) (any, error)) (*exec.Subquery, *Plan, error) {
	p, q, err := s.subplan(n)
	if err != nil {
		if se, ok := err.(*sql.Error); ok && se.Code == sql.CodeNotSupported && s.q != nil && s.q.env != nil {
			return &exec.Subquery{Text: restore(n), T: t, Probe: probe,
				Run:    func() ([][]any, error) { return nil, err },
				Reduce: reduce}, nil, nil
		}
		return nil, nil, err
	}
	sq := &exec.Subquery{Text: restore(n), T: t, Probe: probe, Reduce: reduce}
	for _, c := range q.corr {
		sq.Outer = append(sq.Outer, c.outer)
		sq.Cells = append(sq.Cells, c.cell)
	}
	env := s.q.env
	sq.Run = func() ([][]any, error) { return env.Run(p) }
	return sq, p, nil
}

func (s *scope) scalarSubquery(x *ast.SubqueryExpr) (exec.Expr, error) {
	p, _, err := s.subplan(x.Query)
	t := types.Text
	if err == nil {
		if len(p.Output) != 1 {
			return nil, s.errf(sql.CodeSyntax, "", "subquery must return only one column")
		}
		t = p.Output[0].Type
	}
	sq, _, err := s.subquery(x.Query, t, nil, func(rows [][]any, _ any) (any, error) {
		switch len(rows) {
		case 0:
			return nil, nil
		case 1:
			return rows[0][0], nil
		}
		return nil, sql.Errorf("21000", "more than one row returned by a subquery used as an expression")
	})
	return sq, err
}

func (s *scope) existsSubquery(x *ast.ExistsSubqueryExpr) (exec.Expr, error) {
	sub, ok := x.Sel.(*ast.SubqueryExpr)
	if !ok {
		return nil, s.errf(sql.CodeNotSupported, "", "EXISTS needs a subquery")
	}
	sq, _, err := s.subquery(sub.Query, types.Bool, nil, func(rows [][]any, _ any) (any, error) { return len(rows) > 0, nil })
	if err != nil {
		return nil, err
	}
	if x.Not {
		return &exec.Not{X: sq}, nil
	}
	return sq, nil
}

// membership is x op ANY/ALL (rows): three-valued, as in PostgreSQL.
func membership(op string, all bool) func(rows [][]any, probe any) (any, error) {
	return func(rows [][]any, probe any) (any, error) {
		if len(rows) == 0 {
			return all, nil
		}
		if probe == nil {
			return nil, nil
		}
		sawNull := false
		for _, r := range rows {
			if r[0] == nil {
				sawNull = true
				continue
			}
			hit := compareOp(op, CompareValues(probe, r[0]))
			if hit != all {
				return !all, nil
			}
		}
		if sawNull {
			return nil, nil
		}
		return all, nil
	}
}

func compareOp(op string, c int) bool {
	switch op {
	case "=":
		return c == 0
	case "<>", "!=":
		return c != 0
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	case ">=":
		return c >= 0
	}
	return false
}

func (s *scope) inSubquery(x *ast.PatternInExpr) (exec.Expr, error) {
	sub, ok := x.Sel.(*ast.SubqueryExpr)
	if !ok {
		return nil, s.errf(sql.CodeNotSupported, "", "IN needs a list or a subquery")
	}
	probe, err := s.compile(x.Expr)
	if err != nil {
		return nil, err
	}
	sq, _, err := s.subquery(sub.Query, types.Bool, probe, membership("=", false))
	if err != nil {
		return nil, err
	}
	if x.Not {
		return &exec.Not{X: sq}, nil
	}
	return sq, nil
}

func (s *scope) compareSubquery(x *ast.CompareSubqueryExpr) (exec.Expr, error) {
	sub, ok := x.R.(*ast.SubqueryExpr)
	if !ok {
		return nil, s.errf(sql.CodeNotSupported, "", "ANY/ALL needs a subquery or an array")
	}
	probe, err := s.compile(x.L)
	if err != nil {
		return nil, err
	}
	ops := map[string]string{"eq": "=", "ne": "<>", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
	op, ok := ops[x.Op.String()]
	if !ok {
		return nil, s.errf(sql.CodeNotSupported, "", "operator %s with ANY/ALL is not supported", x.Op)
	}
	sq, _, err := s.subquery(sub.Query, types.Bool, probe, membership(op, x.All))
	return sq, err
}

// regexp is x ~ pattern (the front end's REGEXP; ~* arrives as REGEXP
// __ci(pattern)): a vectorised call of exec's ~ or ~*.
func (s *scope) regexp(x *ast.PatternRegexpExpr) (exec.Expr, error) {
	name, pattern := "~", x.Pattern
	if c, ok := pattern.(*ast.FuncCallExpr); ok && c.FnName.L == sql.CIFunc && len(c.Args) == 1 {
		name, pattern = "~*", c.Args[0]
	}
	l, err := s.compile(x.Expr)
	if err != nil {
		return nil, err
	}
	r, err := s.compile(pattern)
	if err != nil {
		return nil, err
	}
	for _, e := range []exec.Expr{l, r} {
		if e.Type() != types.Text && e.Type() != types.Unknown && !isTextLiteral(e) {
			return nil, s.errf(sql.CodeUndefinedFunc, "", "operator does not exist: %s %s %s", exec.PGName(l.Type()), name, exec.PGName(r.Type())).(*sql.Error).
				WithHint("~ matches text; cast the value to text, e.g. x::text ~ '^1'")
		}
	}
	out, err := s.resolveBuiltin(name, []exec.Expr{l, r})
	if err != nil {
		return nil, err
	}
	if x.Not {
		out = &exec.Not{X: out}
	}
	return out, nil
}

// catalogCall compiles a call of a catalog function (pgcat), of an ANY/ALL
// over an array, or of ARRAY(subquery). handled is false for names it does
// not know.
func (s *scope) catalogCall(x *ast.FuncCallExpr) (exec.Expr, bool, error) {
	name := x.FnName.L
	switch name {
	case sql.ArraySubFunc:
		if len(x.Args) != 1 {
			return nil, true, s.errf(sql.CodeSyntax, "", "ARRAY(...) needs one subquery")
		}
		sub, ok := x.Args[0].(*ast.SubqueryExpr)
		if !ok {
			return nil, true, s.errf(sql.CodeSyntax, "", "ARRAY(...) needs a subquery")
		}
		sq, _, err := s.subquery(sub.Query, types.Text, nil, func(rows [][]any, _ any) (any, error) {
			vals := make([]any, len(rows))
			for i, r := range rows {
				vals[i] = r[0]
			}
			return pgcat.FormatArray(vals), nil
		})
		if err != nil {
			return nil, true, err
		}
		oid := uint32(1009)
		if p, _, perr := s.subplan(sub.Query); perr == nil && len(p.Output) == 1 {
			if a := pgcat.ArrayOID(p.Output[0].PGOID()); a != 0 {
				oid = a
			}
		}
		return &pgTyped{Expr: sq, oid: oid}, true, nil
	case sql.AnyFunc, sql.AllFunc:
		return s.anyArray(x)
	case "_pg_expandarray", "unnest", "generate_subscripts":
		return s.expandArray(x)
	case sql.FieldFunc:
		return s.field(x)
	}
	f, ok := pgcat.LookupFunc(name)
	if !ok {
		return nil, false, nil
	}
	if s.q == nil || s.q.env == nil {
		return nil, true, s.errf(sql.CodeNotSupported, name, "function %s is not supported in a continuous query", name)
	}
	if len(x.Args) < f.Min || len(x.Args) > f.Max {
		return nil, true, s.errf(sql.CodeUndefinedFunc, name, "function %s takes %d to %d arguments, got %d", name, f.Min, f.Max, len(x.Args))
	}
	args := make([]exec.Expr, len(x.Args))
	ts := make([]types.Type, len(x.Args))
	for i, a := range x.Args {
		e, err := s.compile(a)
		if err != nil {
			return nil, true, err
		}
		if e.Type() == types.Unknown {
			e = &exec.Literal{T: types.Text}
		}
		args[i], ts[i] = e, e.Type()
	}
	t, oid := f.ResultType(ts)
	env := s.q.env.Catalog()
	var e exec.Expr = &exec.RowFunc{Name: name, Args: args, T: t, Strict: f.Strict,
		F: func(a []any) (any, error) { return f.Eval(env, a) }}
	if oid != 0 && oid != t.OID() {
		e = &pgTyped{Expr: e, oid: oid}
	}
	return e, true, nil
}

// anyArray is x op ANY(array) / x op ALL(array) over an array value (its
// text form): __any('op', x, arr).
func (s *scope) anyArray(x *ast.FuncCallExpr) (exec.Expr, bool, error) {
	if len(x.Args) != 3 {
		return nil, true, s.errf(sql.CodeSyntax, "", "ANY/ALL needs an operand and an array")
	}
	opE, err := s.compile(x.Args[0])
	if err != nil {
		return nil, true, err
	}
	lit, ok := opE.(*exec.Literal)
	if !ok {
		return nil, true, s.errf(sql.CodeSyntax, "", "ANY/ALL operator")
	}
	op, _ := lit.V.(string)
	l, err := s.compile(x.Args[1])
	if err != nil {
		return nil, true, err
	}
	arr, err := s.compile(x.Args[2])
	if err != nil {
		return nil, true, err
	}
	if arr.Type() != types.Text && arr.Type() != types.Unknown {
		return nil, true, s.errf(sql.CodeDatatypeMismatch, "", "op ANY/ALL (array) requires array on right side")
	}
	all := x.FnName.L == sql.AllFunc
	red := membership(op, all)
	lt := l.Type()
	return &exec.RowFunc{Name: x.FnName.L, Args: []exec.Expr{l, arr}, T: types.Bool, F: func(a []any) (any, error) {
		if a[1] == nil {
			return nil, nil
		}
		var rows [][]any
		for _, el := range pgcat.ParseArray(a[1].(string)) {
			if el == nil {
				rows = append(rows, []any{nil})
				continue
			}
			v, err := parseAs(*el, lt)
			if err != nil {
				return nil, err
			}
			rows = append(rows, []any{v})
		}
		return red(rows, a[0])
	}}, true, nil
}

// parseAs reads an array element's text as a value of type t.
func parseAs(s string, t types.Type) (any, error) {
	switch t {
	case types.Int:
		var n int64
		if _, err := fmt.Sscan(s, &n); err != nil {
			return nil, sql.Errorf("22P02", "invalid input syntax for type bigint: %q", s)
		}
		return n, nil
	case types.Double:
		return exec.ParseFloat(s)
	case types.Bool:
		b, ok := exec.ParseBool(s)
		if !ok {
			return nil, sql.Errorf("22P02", "invalid input syntax for type boolean: %q", s)
		}
		return b, nil
	}
	return s, nil
}

// pgTyped gives an expression the PostgreSQL type clients are told (oid,
// name, regtype) while the engine computes it as Int or Text.
type pgTyped struct {
	exec.Expr
	oid uint32
}

// pgOID is the PostgreSQL type OID of an output expression over input.
func pgOID(e exec.Expr, input types.Schema) uint32 {
	switch x := e.(type) {
	case *pgTyped:
		return x.oid
	case *exec.ColRef:
		if x.Idx >= 0 && x.Idx < len(input) && input[x.Idx].Type == x.T {
			return input[x.Idx].PGOID()
		}
	}
	return 0
}

// CompareValues orders result values of one column; NULL sorts last
// ascending, as in PostgreSQL.
func CompareValues(a, b any) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return 1
	case b == nil:
		return -1
	}
	switch x := a.(type) {
	case int64:
		switch y := b.(type) {
		case int64:
			return cmp3(x, y)
		case float64:
			return cmp3(float64(x), y)
		}
	case float64:
		switch y := b.(type) {
		case float64:
			return cmp3(x, y)
		case int64:
			return cmp3(x, float64(y))
		}
	case string:
		if y, ok := b.(string); ok {
			return strings.Compare(x, y)
		}
	case bool:
		if y, ok := b.(bool); ok {
			switch {
			case x == y:
				return 0
			case !x:
				return -1
			}
			return 1
		}
	case interface{ UnixMilli() int64 }:
		if y, ok := b.(interface{ UnixMilli() int64 }); ok {
			return cmp3(x.UnixMilli(), y.UnixMilli())
		}
	}
	return strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
}

func cmp3[T int64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// tableFuncRel plans a set-returning function in FROM (the front end made
// it SELECT __tablefunc_name(args) AS col): unnest(array) and
// generate_series(start, stop[, step]).
func tableFuncRel(q *qctx, sel *ast.SelectStmt, alias, src string) (*Rel, bool, error) {
	if sel.From != nil || sel.Fields == nil || len(sel.Fields.Fields) != 1 {
		return nil, false, nil
	}
	f := sel.Fields.Fields[0]
	call, ok := f.Expr.(*ast.FuncCallExpr)
	if !ok {
		return nil, false, nil
	}
	name, ok := strings.CutPrefix(call.FnName.L, sql.TableFuncPrefix)
	if !ok {
		return nil, false, nil
	}
	s := &scope{src: src, eventTime: -1, q: q, noAggs: "functions in FROM"}
	r := &Rel{Kind: RelFunc, Func: name}
	for _, a := range call.Args {
		e, err := s.compile(a)
		if err != nil {
			return nil, true, err
		}
		r.Args = append(r.Args, e)
	}
	var t types.Type
	switch name {
	case "unnest":
		if len(r.Args) != 1 {
			return nil, true, sql.Errorf(sql.CodeNotSupported, "unnest takes one array")
		}
		t = types.Text
	case "generate_series":
		if len(r.Args) < 2 || len(r.Args) > 3 {
			return nil, true, sql.Errorf(sql.CodeUndefinedFunc, "generate_series takes (start, stop[, step])")
		}
		for _, a := range r.Args {
			if a.Type() != types.Int && a.Type() != types.Unknown {
				return nil, true, sql.Errorf(sql.CodeNotSupported, "generate_series over %s is not supported; it counts integers", exec.PGName(a.Type()))
			}
		}
		t = types.Int
	default:
		return nil, true, sql.Errorf(sql.CodeNotSupported, "set-returning function %s in FROM is not supported", name).
			WithPos(sql.FindPos(src, name)).WithHint("unnest and generate_series are")
	}
	col := f.AsName.O
	if col == "" {
		col = name
	}
	r.Schema = types.Schema{{Name: col, Type: t}}
	r.tabs = []tabRef{{alias: alias}}
	return r, true, nil
}

// FuncRows evaluates a RelFunc's rows.
func FuncRows(r *Rel) ([][]any, error) {
	args := make([]any, len(r.Args))
	for i, a := range r.Args {
		v, err := a.Eval(&exec.Batch{N: 1})
		if err != nil {
			return nil, err
		}
		args[i] = v.Value(0)
	}
	var out [][]any
	switch r.Func {
	case "unnest":
		if args[0] == nil {
			return nil, nil
		}
		for _, el := range pgcat.ParseArray(fmt.Sprint(args[0])) {
			if el == nil {
				out = append(out, []any{nil})
			} else {
				out = append(out, []any{*el})
			}
		}
	case "generate_series":
		for _, a := range args {
			if a == nil {
				return nil, nil
			}
		}
		start, stop := args[0].(int64), args[1].(int64)
		step := int64(1)
		if len(args) == 3 {
			step = args[2].(int64)
		}
		if step == 0 {
			return nil, sql.Errorf(sql.CodeInvalidParameter, "step size cannot equal zero")
		}
		for v := start; (step > 0 && v <= stop) || (step < 0 && v >= stop); v += step {
			out = append(out, []any{v})
			if len(out) > 10_000_000 {
				return nil, sql.Errorf("54000", "generate_series would return more than 10000000 rows")
			}
		}
	}
	return out, nil
}

// windowFunc compiles row_number() OVER (PARTITION BY ... ORDER BY ...),
// the one window function clients' catalog queries use. It numbers the
// whole filtered input, which the relational path evaluates as one batch.
func (s *scope) windowFunc(x *ast.WindowFuncExpr) (exec.Expr, error) {
	if s.q == nil || s.q.env == nil || !s.q.wholeInput {
		return nil, s.errf(sql.CodeNotSupported, "", "window functions are not supported here")
	}
	if !strings.EqualFold(x.Name, "row_number") || len(x.Args) != 0 {
		return nil, s.errf(sql.CodeNotSupported, "", "window function %s is not supported; row_number() is", strings.ToLower(x.Name))
	}
	if s.agg != nil {
		return nil, s.errf(sql.CodeNotSupported, "", "window functions with GROUP BY are not supported")
	}
	spec := x.Spec
	if spec.Name.L != "" || spec.Ref.L != "" || spec.Frame != nil {
		return nil, s.errf(sql.CodeNotSupported, "", "named windows and frames are not supported")
	}
	rn := &exec.RowNumber{Compare: CompareValues}
	if spec.PartitionBy != nil {
		for _, it := range spec.PartitionBy.Items {
			e, err := s.compile(it.Expr)
			if err != nil {
				return nil, err
			}
			rn.Partition = append(rn.Partition, e)
		}
	}
	if spec.OrderBy != nil {
		for _, it := range spec.OrderBy.Items {
			x, k := orderItem(it)
			e, err := s.compile(x)
			if err != nil {
				return nil, err
			}
			rn.Order = append(rn.Order, e)
			rn.OrderCompare = append(rn.OrderCompare, k.Compare)
		}
	}
	return rn, nil
}

// hasWindowFunc reports a window function in the select list.
func hasWindowFunc(stmt *ast.SelectStmt) bool {
	found := false
	for _, f := range stmt.Fields.Fields {
		if f.Expr != nil {
			f.Expr.Accept(&windowFinder{found: &found})
		}
	}
	return found
}

type windowFinder struct{ found *bool }

func (w *windowFinder) Enter(n ast.Node) (ast.Node, bool) {
	switch n.(type) {
	case *ast.SubqueryExpr:
		return n, true
	case *ast.WindowFuncExpr:
		*w.found = true
		return n, true
	case *ast.FuncCallExpr:
		if srfInSelect[n.(*ast.FuncCallExpr).FnName.L] {
			*w.found = true
			return n, true
		}
	}
	return n, false
}
func (w *windowFinder) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// srfInSelect are the set-returning functions a select list may call.
var srfInSelect = map[string]bool{"_pg_expandarray": true, "unnest": true, "generate_subscripts": true}

// expandArray is a set-returning function over an array in a select list:
// each input row is repeated once per element of the array, the executor
// appending the element's position as one more column (Plan.Expand).
// Several such calls in one select list run in lockstep, as PostgreSQL
// runs them: as many rows as the longest array has elements, the shorter
// ones giving NULLs past their end.
//
//	unnest(arr)                     the element
//	generate_subscripts(arr, 1)     its position
//	information_schema._pg_expandarray(arr)
//	                                the composite (x, n) of both, carried
//	                                as the text '(x,n)' (PgJDBC's getPrimaryKeys)
func (s *scope) expandArray(x *ast.FuncCallExpr) (exec.Expr, bool, error) {
	name := x.FnName.L
	want := 1
	if name == "generate_subscripts" {
		want = 2
	}
	if s.q == nil || !s.q.wholeInput || s.agg != nil || len(x.Args) != want {
		return nil, true, s.errf(sql.CodeNotSupported, name, "%s(array) is supported in the select list of a query without GROUP BY", name)
	}
	arr, err := s.compile(x.Args[0])
	if err != nil {
		return nil, true, err
	}
	if want == 2 {
		// (NULL: a parameter not bound yet, when a statement is described.)
		if d, err := Constant(x.Args[1], types.Int, s.src); err != nil || (d != int64(1) && d != nil) {
			return nil, true, s.errf(sql.CodeNotSupported, name, "generate_subscripts over a dimension other than 1 is not supported")
		}
	}
	if txt := restore(x.Args[0]); !slices.Contains(s.q.expandText, txt) {
		s.q.expand, s.q.expandText = append(s.q.expand, arr), append(s.q.expandText, txt)
	}
	ord := &exec.ColRef{Idx: len(s.input), Name: "ordinality", T: types.Int}
	switch name {
	case "generate_subscripts":
		return ord, true, nil
	case "unnest":
		return s.element(arr, ord), true, nil
	}
	return &exec.RowFunc{Name: "_pg_expandarray", Args: []exec.Expr{arr, ord}, T: types.Text, F: func(a []any) (any, error) {
		el := arrayElement(a[0], a[1])
		if el == nil {
			el = "NULL"
		}
		return fmt.Sprintf("(%v,%v)", el, a[1]), nil
	}}, true, nil
}

// element is arr's element at position ord: a BIGINT for the catalog's
// integer arrays (indkey, conkey, ...), else TEXT.
func (s *scope) element(arr, ord exec.Expr) exec.Expr {
	t := types.Text
	if c, ok := arr.(*exec.ColRef); ok && c.Idx < len(s.input) && pgcat.IntArrayColumn(s.input[c.Idx].Name) {
		t = types.Int
	}
	return &exec.RowFunc{Name: sql.SubscriptFunc, Args: []exec.Expr{arr, ord}, T: t, F: func(a []any) (any, error) {
		el := arrayElement(a[0], a[1])
		if el == nil || t == types.Text {
			return el, nil
		}
		return parseAs(el.(string), types.Int)
	}}
}

func arrayElement(arr, ord any) any {
	s, ok := arr.(string)
	n, ok2 := ord.(int64)
	if !ok || !ok2 {
		return nil
	}
	els := pgcat.ParseArray(s)
	if !strings.HasPrefix(s, "{") { // int2vector: '1 2'
		for _, f := range strings.Fields(s) {
			els = append(els, &f)
		}
	}
	if n < 1 || int(n) > len(els) || els[n-1] == nil {
		return nil
	}
	return *els[n-1]
}

// field is (composite).name over the one composite here, _pg_expandarray's
// (x, n): x the element, n its position.
func (s *scope) field(x *ast.FuncCallExpr) (exec.Expr, bool, error) {
	if len(x.Args) != 2 {
		return nil, true, s.errf(sql.CodeSyntax, "", "field access")
	}
	name := ""
	if v, err := s.compile(x.Args[1]); err == nil {
		if l, ok := v.(*exec.Literal); ok {
			name, _ = l.V.(string)
		}
	}
	if name != "x" && name != "n" {
		return nil, true, s.errf(sql.CodeNotSupported, "", "field access .%s is not supported (only _pg_expandarray's x and n)", name)
	}
	c, err := s.compile(x.Args[0])
	if err != nil {
		return nil, true, err
	}
	if f, ok := c.(*exec.RowFunc); ok && f.Name == "_pg_expandarray" {
		if name == "n" {
			return f.Args[1], true, nil
		}
		return s.element(f.Args[0], f.Args[1]), true, nil
	}
	if c.Type() != types.Text {
		return nil, true, s.errf(sql.CodeNotSupported, "", "field access on %s is not supported", exec.PGName(c.Type()))
	}
	t, idx := types.Text, 0
	if name == "n" {
		t, idx = types.Int, 1
	}
	return &exec.RowFunc{Name: sql.SubscriptFunc, Args: []exec.Expr{c}, T: t, Strict: true, F: func(a []any) (any, error) {
		v := strings.TrimSuffix(strings.TrimPrefix(a[0].(string), "("), ")")
		parts := strings.Split(v, ",")
		if len(parts) != 2 || parts[idx] == "NULL" {
			return nil, nil
		}
		if t == types.Int {
			return parseAs(parts[idx], types.Int)
		}
		return parts[idx], nil
	}}, true, nil
}

// pgOID is the PostgreSQL type of a post-aggregation output expression
// where it is not its engine type's: ARRAY_AGG's array.
func (a *aggScope) pgOID(e exec.Expr) uint32 {
	if t, ok := e.(*pgTyped); ok {
		return t.oid
	}
	c, ok := e.(*exec.ColRef)
	if !ok {
		return 0
	}
	base := len(a.keys)
	if a.window != nil {
		base += 2
	}
	i := c.Idx - base
	if i < 0 || i >= len(a.calls) || !strings.HasPrefix(a.calls[i].Spec.Name, "ARRAY_AGG") || len(a.calls[i].Args) == 0 {
		return 0
	}
	return pgcat.ArrayOID(a.calls[i].Args[0].Type().OID())
}
