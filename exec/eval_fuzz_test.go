package exec_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/types"
)

// FuzzEval fuzzes SQL text through the whole front end (sql.Parse, the
// planner's type checks) and evaluates the plan's filter and projection on
// a three-row batch: one row from the fuzzer's values, one all NULL, one of
// edge values. It must never panic; errors are fine but must carry a
// SQLSTATE (an internal error means the planner and the evaluator disagree),
// and every result column must have the type the planner declared.
func FuzzEval(f *testing.F) {
	for _, q := range []string{
		"i + j * 2, i / j, i % j, -i FROM t WHERE i BETWEEN 1 AND 10",
		"f / 2, ROUND(f, 2), ROUND(f), FLOOR(f), CEIL(f), ABS(f) FROM t",
		"s || 'x', CONCAT(s, i, f, b), UPPER(s), LOWER(s), LENGTH(s) FROM t WHERE s LIKE '%a_'",
		"SUBSTRING(s FROM i FOR j), SUBSTR(s, 2), TRIM(BOTH 'x' FROM s), LTRIM(s, 'ab') FROM t",
		"CASE WHEN i > 0 THEN 'pos' WHEN i < 0 THEN 'neg' ELSE 'zero' END FROM t",
		"CASE i WHEN 1 THEN f ELSE 10 / i END, COALESCE(i, j, 0), NULLIF(s, '') FROM t",
		"i IN (1, 2, NULL), s NOT IN ('a', 'b'), b IS NOT TRUE, s ILIKE 'A%' ESCAPE '#' FROM t",
		"CAST(s AS BIGINT), s::double precision, i::text, f::bigint, b::int, s::boolean FROM t",
		"ts + INTERVAL '1' HOUR, (ts - TIMESTAMP '2026-01-01')::text, ts - INTERVAL '1 day 02:00:00' FROM t",
		"(INTERVAL '1' MINUTE * f)::text, s::interval, CAST(ts AS TEXT) FROM t WHERE ts > '2026-01-01'",
		"i FROM t WHERE NOT (b OR i <> 0 AND 100 / i > 2)",
		"REPLACE(s, 'a', 'bb'), STRPOS(s, 'b'), POSITION('x' IN s), OCTET_LENGTH(s) FROM t",
		"9223372036854775807 + i, -9223372036854775808 - i, i * i * i FROM t",
	} {
		f.Add(q, int64(7), 2.5, "abc", true, int64(1_767_225_600_000))
	}
	f.Add("s FROM t", int64(0), math.NaN(), "", false, int64(math.MinInt64))
	f.Add("i, f FROM t", int64(math.MinInt64), math.Inf(-1), "ñandú\xff", false, int64(math.MaxInt64))

	f.Fuzz(func(t *testing.T, text string, i int64, fl float64, s string, b bool, ms int64) {
		runFuzzQuery(t, "SELECT "+text, fuzzBatch(i, fl, s, b, ms))
	})
}

// FuzzGenExpr builds the queries from the fuzzer's bytes with a grammar of
// the supported operators and functions that asks for an operand of each
// type where one is needed (and now and then for any type, to reach the type
// errors), so that most queries plan and run, unlike mutated SQL text.
func FuzzGenExpr(f *testing.F) {
	for _, seed := range []string{"", "\x00", "\x01\x02\x03", "abcdefghijklmnop", "\xff\xfe\xfd\xfc\xfb\xfa", "0123456789012345678901234567890123456789"} {
		f.Add([]byte(seed), int64(7), 2.5, "abc", true, int64(1_767_225_600_000))
	}
	f.Fuzz(func(t *testing.T, prog []byte, i int64, fl float64, s string, b bool, ms int64) {
		g := &gen{prog: prog}
		x, y := g.expr(g.outType(), 0), g.expr(g.outType(), 0)
		query := "SELECT " + x + " AS x, " + y + " AS y FROM t WHERE " + g.expr(gBool, 0)
		runFuzzQuery(t, query, fuzzBatch(i, fl, s, b, ms))
	})
}

// gen turns bytes into SQL expression text; it ends in leaves when the
// bytes run out.
type gen struct {
	prog []byte
	pos  int
}

type gType int

const (
	gInt gType = iota
	gDouble
	gText
	gBool
	gTimestamp
	gInterval
	gTypes
)

func (g *gen) next(n int) int {
	if g.pos >= len(g.prog) {
		return 0
	}
	g.pos++
	return int(g.prog[g.pos-1]) % n
}

func (g *gen) pick(opts ...string) string { return opts[g.next(len(opts))] }

// outType is a type a select-list column can have (not INTERVAL).
func (g *gen) outType() gType { return gType(g.next(int(gTimestamp) + 1)) }

var genLeaves = [gTypes][]string{
	gInt:       {"i", "j", "0", "1", "-1", "7", "9223372036854775807", "-9223372036854775808", "NULL"},
	gDouble:    {"f", "2.5", "-0.5", "0.0", "1e300", "'NaN'::double precision", "'-Infinity'::float8", "NULL"},
	gText:      {"s", "''", "'a'", "'ñandú'", "'%a_'", "'x\\'", "'1'", "' 2.5 '", "'1 minute'", "NULL"},
	gBool:      {"b", "TRUE", "FALSE", "NULL"},
	gTimestamp: {"ts", "TIMESTAMP '2026-01-01 00:00:00'", "'2026-01-02'::timestamp", "NULL"},
	gInterval:  {"INTERVAL '1' HOUR", "INTERVAL '1 day 02:00:00'", "'-90 seconds'::interval", "NULL"},
}

var genTypeNames = [gTypes]string{"BIGINT", "DOUBLE PRECISION", "TEXT", "BOOLEAN", "TIMESTAMP", "INTERVAL"}

// expr is an expression of type t (usually).
func (g *gen) expr(t gType, depth int) string {
	if depth > 4 || g.pos >= len(g.prog) {
		return g.pick(genLeaves[t]...)
	}
	d := depth + 1
	e := func(t gType) string { return g.expr(t, d) }
	any := func() string { return g.expr(gType(g.next(int(gTypes))), d) }
	switch g.next(16) {
	case 0, 1:
		return g.pick(genLeaves[t]...)
	case 2:
		return any() // most likely a type error
	case 3:
		return "CASE WHEN " + e(gBool) + " THEN " + e(t) + " ELSE " + e(t) + " END"
	case 4:
		u := gType(g.next(int(gTypes)))
		return "CASE " + e(u) + " WHEN " + e(u) + " THEN " + e(t) + " WHEN " + e(u) + " THEN " + e(t) + " END"
	case 5:
		return g.pick("COALESCE(", "NULLIF(") + e(t) + ", " + e(t) + ")"
	case 6:
		if g.next(2) == 0 {
			return "CAST(" + any() + " AS " + genTypeNames[t] + ")"
		}
		return "(" + any() + ")::" + genTypeNames[t]
	}
	switch t {
	case gInt:
		switch g.next(6) {
		case 0, 1:
			return "(" + e(gInt) + g.pick(" + ", " - ", " * ", " / ", " % ") + e(gInt) + ")"
		case 2:
			return "(" + g.pick("-", "+", "ABS", "FLOOR", "CEIL", "ROUND") + "(" + e(gInt) + "))"
		case 3:
			return "ROUND(" + e(gInt) + ", " + e(gInt) + ")"
		case 4:
			return g.pick("LENGTH(", "OCTET_LENGTH(", "CHAR_LENGTH(") + e(gText) + ")"
		default:
			if g.next(2) == 0 {
				return "STRPOS(" + e(gText) + ", " + e(gText) + ")"
			}
			return "POSITION(" + e(gText) + " IN " + e(gText) + ")"
		}
	case gDouble:
		switch g.next(4) {
		case 0, 1:
			return "(" + e(gDouble) + g.pick(" + ", " - ", " * ", " / ", " % ") + g.expr(g.pickNum(), d) + ")"
		case 2:
			return "(" + g.pick("ABS(", "FLOOR(", "CEIL(", "CEILING(", "ROUND(", "-(") + e(gDouble) + "))"
		default:
			return "ROUND(" + e(gDouble) + ", " + e(gInt) + ")"
		}
	case gText:
		switch g.next(7) {
		case 0, 1:
			return "(" + e(gText) + " || " + any() + ")"
		case 2:
			return "CONCAT(" + any() + ", " + any() + ", " + any() + ")"
		case 3:
			return g.pick("LOWER(", "UPPER(", "TRIM(", "LTRIM(", "RTRIM(", "BTRIM(") + e(gText) + ")"
		case 4:
			if g.next(2) == 0 {
				return "SUBSTRING(" + e(gText) + ", " + e(gInt) + ")"
			}
			return "SUBSTRING(" + e(gText) + " FROM " + e(gInt) + " FOR " + e(gInt) + ")"
		case 5:
			return "TRIM(" + g.pick("BOTH ", "LEADING ", "TRAILING ", "") + e(gText) + " FROM " + e(gText) + ")"
		default:
			return "REPLACE(" + e(gText) + ", " + e(gText) + ", " + e(gText) + ")"
		}
	case gBool:
		u := gType(g.next(int(gTypes)))
		switch g.next(8) {
		case 0, 1:
			return "(" + e(u) + g.pick(" = ", " <> ", " < ", " <= ", " > ", " >= ") + e(u) + ")"
		case 2:
			return "(" + e(gBool) + g.pick(" AND ", " OR ") + e(gBool) + ")"
		case 3:
			return "(" + g.pick("NOT ", "") + e(gBool) + g.pick(" IS NULL", " IS NOT NULL", " IS TRUE", " IS NOT FALSE", "") + ")"
		case 4:
			return "(" + e(gText) + g.pick(" LIKE ", " NOT LIKE ", " ILIKE ") + e(gText) + g.pick("", " ESCAPE '#'", " ESCAPE ''") + ")"
		case 5:
			return "(" + e(u) + g.pick(" IN (", " NOT IN (") + e(u) + ", " + e(u) + "))"
		case 6:
			return "(" + e(u) + g.pick(" BETWEEN ", " NOT BETWEEN ") + e(u) + " AND " + e(u) + ")"
		default:
			return "(" + e(u) + " IS NULL)"
		}
	case gTimestamp:
		if g.next(2) == 0 {
			return "(" + e(gTimestamp) + g.pick(" + ", " - ") + e(gInterval) + ")"
		}
		return "(" + e(gInterval) + " + " + e(gTimestamp) + ")"
	case gInterval:
		switch g.next(4) {
		case 0:
			return "(" + e(gTimestamp) + " - " + e(gTimestamp) + ")"
		case 1:
			return "(" + e(gInterval) + g.pick(" + ", " - ") + e(gInterval) + ")"
		case 2:
			return "(" + e(gInterval) + g.pick(" * ", " / ") + g.expr(g.pickNum(), d) + ")"
		default:
			return "(-" + e(gInterval) + ")"
		}
	}
	return g.pick(genLeaves[t]...)
}

func (g *gen) pickNum() gType { return gType(g.next(2)) } // gInt or gDouble

// runFuzzQuery plans query and evaluates its filter and projection on batch.
func runFuzzQuery(t *testing.T, query string, batch *exec.Batch) {
	// A hang is a failure too: crash with the query so the fuzzer keeps it.
	watchdog := time.AfterFunc(10*time.Second, func() { panic(fmt.Sprintf("%q took over 10s", query)) })
	defer watchdog.Stop()
	st, err := sql.Parse(query)
	if err != nil {
		checkCode(t, query, err)
		return
	}
	sel, ok := st.(*sql.Select)
	if !ok {
		return
	}
	p, err := planner.BuildQuery(evalCatalog, sel.Stmt, query)
	if err != nil {
		checkCode(t, query, err)
		return
	}
	if p.Aggregate {
		return // aggregation is not part of this fuzz target
	}
	fb, err := exec.FilterBatch(batch, p.Filter)
	if err != nil {
		checkCode(t, query, err)
		return
	}
	if fb.N > batch.N {
		t.Fatalf("%s: filter returned %d rows of %d", query, fb.N, batch.N)
	}
	for c, e := range p.Project {
		v, err := e.Eval(fb)
		if err != nil {
			checkCode(t, query, err)
			return
		}
		if v.N != fb.N || (v.Null != nil && len(v.Null) != v.N) {
			t.Fatalf("%s: column %d: %d rows, want %d", query, c, v.N, fb.N)
		}
		if c < len(p.Output) && v.T != p.Output[c].Type {
			t.Fatalf("%s: column %d (%s) is %s, planned %s", query, c, e, v.T, p.Output[c].Type)
		}
		for r := 0; r < v.N; r++ {
			if !valueHasType(v.Value(r), v.T) {
				t.Fatalf("%s: column %d row %d: %#v is not a %s", query, c, r, v.Value(r), v.T)
			}
		}
	}
}

func checkCode(t *testing.T, query string, err error) {
	t.Helper()
	if code := sql.CodeOf(err); code == sql.CodeInternal {
		t.Fatalf("%s: error without a SQLSTATE: %v", query, err)
	}
}

func valueHasType(v any, t types.Type) bool {
	switch v.(type) {
	case nil:
		return true
	case int64:
		return t == types.Int || t == types.Interval
	case float64:
		return t == types.Double
	case string:
		return t == types.Text
	case bool:
		return t == types.Bool
	case time.Time:
		return t == types.Timestamp
	}
	return false
}

// fuzzBatch is the evaluation batch: the fuzzer's row, a NULL row and a row
// of edge values.
func fuzzBatch(i int64, f float64, s string, b bool, ms int64) *exec.Batch {
	nulls := []bool{false, true, false}
	return &exec.Batch{N: 3, Cols: []*exec.Vec{
		{T: types.Int, N: 3, I: []int64{i, 0, math.MinInt64}, Null: nulls},
		{T: types.Int, N: 3, I: []int64{2, 0, -1}, Null: nulls},
		{T: types.Double, N: 3, F: []float64{f, 0, math.NaN()}, Null: nulls},
		{T: types.Text, N: 3, S: []string{s, "", ""}, Null: nulls},
		{T: types.Bool, N: 3, B: []bool{b, false, false}, Null: nulls},
		{T: types.Timestamp, N: 3, I: []int64{ms, 0, math.MaxInt64}, Null: nulls},
	}}
}
